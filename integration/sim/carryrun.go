package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	updatepb "go.temporal.io/api/update/v1"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// carryRun is the dispatcher run the carry world scripts: what waits in it and what of its
// predecessors' backlog it has not read yet (the workflow's State.Pending and State.Backlog).
type carryRun struct {
	id      string
	owner   takeover.Owner
	queue   []dispatcher.Request
	backlog []dispatcher.Source
}

// startSources is what the dispatcher workflow's run reads back first (dispatcher's startSources,
// for runs with its carry-every-run version): a takeover's run scans the runs before its chain.
func (w *CarryWorld) startSources(runID string, o takeover.Owner) []dispatcher.Source {
	return []dispatcher.Source{{WorkflowID: w.id, RunID: o.PriorRunID, Scan: true, Chain: runID, RunLog: o.RunLog}}
}

// live plays the open run until it ends on its own terms (mid-activity) or the plan moves on.
func (w *CarryWorld) live() {
	for range 2 + w.runR.IntN(8) {
		w.sleep(time.Duration(1+w.runR.IntN(20)) * time.Second)
		switch x := w.runR.Float64(); {
		case x < 0.35:
			w.accept(1 + w.runR.IntN(3))
		case x < 0.6:
			if len(w.open.backlog) > 0 && !w.page(w.runR.Float64() < 0.1) {
				return // terminated with the page in flight: the next takeover ends it
			}
		case x < 0.9:
			if !w.dispatch(1+w.runR.IntN(3), w.runR.Float64() < 0.1) {
				return
			}
		default:
			w.continueAsNew()
		}
	}
}

// carryAll is the last run after the heal: it reads its whole backlog, then dispatches everything.
func (w *CarryWorld) carryAll() {
	for len(w.open.backlog) > 0 {
		if !w.page(false) {
			return // wedged: violated
		}
	}
	w.dispatch(len(w.open.queue), false)
}

// heal ends every fault, lets visibility catch up, and makes a last takeover whose run carries
// everything over.
func (w *CarryWorld) heal() {
	w.faultsOff = true
	w.rec.Add("world", "heal")
	w.takeover(true)
}

// newRequest is a fresh request, or (sometimes) one accepted before: a client sends again.
func (w *CarryWorld) newRequest() dispatcher.Request {
	if w.nextTask > 0 && w.runR.Float64() < 0.15 {
		return carryRequest(w.runR.IntN(w.nextTask))
	}
	w.nextTask++
	return carryRequest(w.nextTask - 1)
}

func carryRequest(n int) dispatcher.Request {
	sum := sha256.Sum256(fmt.Appendf(nil, "payload %d", n))
	return dispatcher.Request{Type: "agent", TaskID: fmt.Sprintf("t%d", n), PayloadSHA256: hex.EncodeToString(sum[:])}
}

// accept has the open run accept n requests, by signal or by update.
func (w *CarryWorld) accept(n int) {
	for range n {
		r := w.newRequest()
		p := w.payloads(r)
		ev := signalEvent(p)
		how := "signal"
		if w.runR.IntN(2) == 0 {
			how = "update"
			ev = &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
				Attributes: &historypb.HistoryEvent_WorkflowExecutionUpdateAcceptedEventAttributes{
					WorkflowExecutionUpdateAcceptedEventAttributes: &historypb.WorkflowExecutionUpdateAcceptedEventAttributes{
						AcceptedRequest: &updatepb.Request{Input: &updatepb.Input{Name: dispatcher.UpdateDispatch, Args: p}}}}}
		}
		w.append(ev)
		if _, ok := w.accepted[r.Key()]; !ok {
			w.accepted[r.Key()] = w.open.id
		}
		w.enqueue(r)
		w.rec.Add(w.open.owner.ServerID, "run %s accepted %s by %s", short(w.open.id), r.TaskID, how)
	}
}

// signalEvent is a SignalDispatch signal of the request p.
func signalEvent(p *commonpb.Payloads) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionSignaledEventAttributes{
			WorkflowExecutionSignaledEventAttributes: &historypb.WorkflowExecutionSignaledEventAttributes{
				SignalName: dispatcher.SignalDispatch, Input: p}}}
}

// enqueue queues r unless it waits already (the workflow's byKey).
func (w *CarryWorld) enqueue(r dispatcher.Request) {
	for _, q := range w.open.queue {
		if q.Key() == r.Key() {
			return
		}
	}
	w.open.queue = append(w.open.queue, r)
}

// page runs the real Backlog activity for the open run's next page, retrying a failure as the
// activity's retry policy does; a page is never skipped. Before the heal a page whose attempts all
// failed (backlogAttempts) fails, and the run goes on with its backlog unread, as the workflow's
// paused carry-over does; after it, a carry-over that still fails past carryHealBound is wedged.
// interrupted leaves the page in flight: the run is terminated before it completes. It reports
// whether the run goes on.
func (w *CarryWorld) page(interrupted bool) bool {
	in := dispatcher.BacklogInput{Sources: w.open.backlog, Max: w.plan.pageMax}
	ids := w.append(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
		Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
			ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
				ActivityType: &commonpb.ActivityType{Name: dispatcher.ActivityBacklog}, Input: w.payloads(in)}}})
	if interrupted {
		w.rec.Add(w.open.owner.ServerID, "run %s: backlog page in flight", short(w.open.id))
		return false
	}
	deadline := time.Now().Add(carryHealBound)
	for attempt := 1; ; attempt++ {
		lagged := w.tm.Lagging(w.id)
		v, err := w.env.ExecuteActivity(dispatcher.ActivityBacklog, in)
		var page dispatcher.BacklogPage
		if err == nil {
			err = v.Get(&page)
		}
		if err == nil {
			if lagged {
				w.probe(ProbeCarryLagged)
			}
			w.applyPage(ids[0], page)
			return true
		}
		w.probe(ProbeCarryRetried)
		w.rec.Add(w.open.owner.ServerID, "run %s: backlog page attempt %d failed: %v", short(w.open.id), attempt, errors.Unwrap(err))
		switch {
		case !w.faultsOff && attempt == backlogAttempts:
			w.append(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED,
				Attributes: &historypb.HistoryEvent_ActivityTaskFailedEventAttributes{
					ActivityTaskFailedEventAttributes: &historypb.ActivityTaskFailedEventAttributes{ScheduledEventId: ids[0]}}})
			return true
		case w.faultsOff && time.Now().After(deadline):
			w.violate("run %s: its carry-over failed for %v after the heal (wedged): %v", short(w.open.id), carryHealBound, err)
			return false
		}
		w.sleep(time.Duration(min(attempt, 60)) * time.Second) // the activity's retry backoff
	}
}

// backlogAttempts is how many attempts a Backlog activity has (the workflow's backlogAttempts).
const backlogAttempts = 5

// applyPage records the page's completion and queues its requests.
func (w *CarryWorld) applyPage(scheduled int64, page dispatcher.BacklogPage) {
	w.append(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
		Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
			ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
				ScheduledEventId: scheduled, Result: w.payloads(page)}}})
	for _, r := range page.Requests {
		w.enqueue(r)
	}
	w.open.backlog = page.Next
	w.rec.Add(w.open.owner.ServerID, "run %s: backlog page of %d, %d sources next", short(w.open.id), len(page.Requests), len(page.Next))
}

// dispatch runs the Dispatch activity for up to n waiting requests, one at a time; interrupted
// leaves the last one in flight (scheduled, never completed: the run is terminated meanwhile). It
// reports whether the run goes on.
func (w *CarryWorld) dispatch(n int, interrupted bool) bool {
	for i := 0; i < n && len(w.open.queue) > 0; i++ {
		r := w.open.queue[0]
		task := dispatcher.Task{Key: r.Key(), Request: r, Owner: w.open.owner}
		ids := w.append(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
			Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
				ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
					ActivityType: &commonpb.ActivityType{Name: dispatcher.ActivityDispatch}, Input: w.payloads(task)}}})
		if interrupted && i == n-1 {
			w.rec.Add(w.open.owner.ServerID, "run %s: dispatch of %s in flight", short(w.open.id), r.TaskID)
			return false
		}
		w.append(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
			Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
				ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
					ScheduledEventId: ids[0], Result: w.payloads(dispatcher.Result{})}}})
		w.open.queue = w.open.queue[1:]
		w.completed[r.Key()] = true
		w.rec.Add(w.open.owner.ServerID, "run %s dispatched %s", short(w.open.id), r.TaskID)
	}
	return true
}

// continueAsNew has the open run continue as new, carrying what waits and what it has not read.
func (w *CarryWorld) continueAsNew() {
	w.sleep(time.Millisecond)
	st := dispatcher.State{Owner: w.open.owner, Pending: w.open.queue, Backlog: w.open.backlog}
	next := w.tm.ContinueAsNewWith(w.id, w.payloads(dispatcher.Input{Owner: w.open.owner, Carry: &st}))
	w.rec.Add(w.open.owner.ServerID, "run %s continued as new as %s carrying %d waiting, %d sources", short(w.open.id),
		short(next), len(st.Pending), len(st.Backlog))
	w.runs = append(w.runs, next)
	w.open.id = next
}

// append adds events to the open run's history.
func (w *CarryWorld) append(evs ...*historypb.HistoryEvent) []int64 {
	ids, err := w.tm.Append(w.id, w.open.id, evs...)
	if err != nil {
		w.t.Fatalf("history of %s: %v", w.open.id, err)
	}
	return ids
}

func (w *CarryWorld) payloads(v ...any) *commonpb.Payloads {
	p, err := w.dc.ToPayloads(v...)
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

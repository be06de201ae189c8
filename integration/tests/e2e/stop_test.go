package e2e_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// A clean stop strands nothing: the leader of q1 is stopped with SIGTERM, three times, while dispatch
// signals flow to both queues. No run of either queue's dispatcher may wait for a workflow task
// timeout: a task that a stopping process took and never finished shows in the run's history as
// WorkflowTaskTimedOut (start-to-close after 10 s, or schedule-to-start on a sticky queue nobody
// polls any more). The stall itself is measured from the histories and logged.
// stopRounds is how many leaders are stopped in turn.
const stopRounds = 5

func TestCleanStopStrandsNoWorkflowTask(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real worker processes")
	}
	c := threeWorkers(t, "s")

	stopSending := c.sendSignals(t, 10*time.Millisecond)
	stoppedAt := map[string]time.Time{} // server ID -> when it was sent SIGTERM
	for round := 1; round <= stopRounds; round++ {
		old, _ := c.waitLeader("q1", takeoverSLA, nil)
		stopped := time.Now()
		stoppedAt[old.id] = stopped
		old.signal(syscall.SIGTERM)
		next, qs := c.waitLeader("q1", takeoverSLA, old)
		t.Logf("round %d: SIGTERM of %s: %s leads q1 (token %d) %v later", round, old.id, next.id, qs.Token, time.Since(stopped).Round(time.Millisecond))
		select {
		case <-old.done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not exit after SIGTERM", old.id)
		}
		if old.Code() != 0 {
			t.Fatalf("%s exited %d after SIGTERM, want 0", old.id, old.Code())
		}
		c.gen++
		c.start(fmt.Sprintf("s%d-%d", round, c.gen))
		c.waitReady(60 * time.Second)
	}
	sent := stopSending()
	t.Logf("%d dispatch signals sent", sent)

	for _, q := range c.queues {
		h := c.taskHistory(q, stoppedAt)
		t.Logf("queue %s: %d runs, longest wait of a workflow task to start: %v", q, h.runs, h.worst.Round(time.Millisecond))
		for _, e := range h.timeouts {
			t.Errorf("queue %s: %s", q, e)
		}
		for _, e := range h.late {
			t.Errorf("queue %s: %s", q, e)
		}
	}
}

// waitReady waits for every live process to answer /readyz.
func (c *cluster) waitReady(d time.Duration) {
	deadline := time.Now().Add(d)
	for _, p := range c.procs {
		for !p.exited() && !p.ready() {
			if time.Now().After(deadline) {
				c.t.Fatalf("%s never became ready", p.id)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// sendSignals sends a distinct dispatch signal to every queue's dispatcher every interval, retrying a
// failed send (the handover gap answers NotFound) until it is accepted, as a fire-and-forget producer
// does. The returned stop ends the senders and returns how many signals were accepted.
func (c *cluster) sendSignals(t *testing.T, every time.Duration) (stop func() int) {
	ctx := t.Context()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	sent := 0
	for _, q := range c.queues {
		id, _ := takeover.WorkflowID(c.project(), q)
		wg.Go(func() {
			for i := 0; ; i++ {
				sum := sha256.Sum256(fmt.Appendf(nil, "%s-%d", q, i))
				req := dispatcher.Request{Type: "e2e", TaskID: fmt.Sprintf("%s-%d", q, i), PayloadSHA256: hex.EncodeToString(sum[:])}
				for err := c.tc.SignalWorkflow(ctx, id, "", dispatcher.SignalDispatch, req); err != nil; err = c.tc.SignalWorkflow(ctx, id, "", dispatcher.SignalDispatch, req) {
					select {
					case <-done:
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
				mu.Lock()
				sent++
				mu.Unlock()
				select {
				case <-done:
					return
				case <-time.After(every):
				}
			}
		})
	}
	var once sync.Once
	stop = func() int {
		once.Do(func() { close(done); wg.Wait() })
		mu.Lock()
		defer mu.Unlock()
		return sent
	}
	t.Cleanup(func() { stop() })
	return stop
}

// taskHistory is what the histories of every run of queue's dispatcher say about who ran its tasks.
type taskHistory struct {
	runs  int
	worst time.Duration // the longest a workflow task waited to be started
	// timeouts describes every workflow task timeout: a stall.
	timeouts []string
	// late describes every task that a process started after it was asked to stop, of a run that began
	// after that: work a process on its way out should never take.
	late []string
}

// taskHistory reads the history of every run of queue's dispatcher; stoppedAt maps the server IDs of
// the processes sent SIGTERM to when.
func (c *cluster) taskHistory(queue string, stoppedAt map[string]time.Time) taskHistory {
	var h taskHistory
	id, _ := takeover.WorkflowID(c.project(), queue)
	var token []byte
	for {
		resp, err := c.tc.ListWorkflow(c.t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", id), NextPageToken: token})
		if err != nil {
			c.t.Fatal(err)
		}
		for _, ex := range resp.GetExecutions() {
			h.runs++
			runID := ex.GetExecution().GetRunId()
			began := ex.GetStartTime().AsTime()
			scheduled := map[int64]time.Time{}
			starter := map[int64]string{} // started event ID -> the identity that took the task
			late := func(ev *historypb.HistoryEvent, identity string) {
				server, _, _ := strings.Cut(identity, "@")
				if at, ok := stoppedAt[server]; ok && began.After(at) {
					h.late = append(h.late, fmt.Sprintf("run %s (began %v after %s was sent SIGTERM): %s at event %d started by the stopping %s",
						runID, began.Sub(at).Round(time.Millisecond), server, ev.GetEventType(), ev.GetEventId(), identity))
				}
			}
			iter := c.tc.GetWorkflowHistory(c.t.Context(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for iter.HasNext() {
				ev, err := iter.Next()
				if err != nil {
					c.t.Fatalf("history of %s/%s: %v", id, runID, err)
				}
				switch ev.GetEventType() {
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
					scheduled[ev.GetEventId()] = ev.GetEventTime().AsTime()
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
					a := ev.GetWorkflowTaskStartedEventAttributes()
					h.worst = max(h.worst, ev.GetEventTime().AsTime().Sub(scheduled[a.GetScheduledEventId()]))
					starter[ev.GetEventId()] = a.GetIdentity()
					late(ev, a.GetIdentity())
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
					late(ev, ev.GetActivityTaskStartedEventAttributes().GetIdentity())
				case enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
					h.timeouts = append(h.timeouts, describeTimeout(runID, ev, scheduled, starter, stoppedAt))
				}
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return h
		}
	}
}

// describeTimeout says which task timed out, who had taken it, and when that process had been sent
// SIGTERM, if it was.
func describeTimeout(runID string, ev *historypb.HistoryEvent, scheduled map[int64]time.Time, starter map[int64]string, stoppedAt map[string]time.Time) string {
	a := ev.GetWorkflowTaskTimedOutEventAttributes()
	at := scheduled[a.GetScheduledEventId()]
	who := "nobody"
	if id, ok := starter[a.GetStartedEventId()]; ok {
		who = id
		server, _, _ := strings.Cut(id, "@")
		if stop, ok := stoppedAt[server]; ok {
			who += fmt.Sprintf(" (the task was scheduled %v after it was sent SIGTERM)", at.Sub(stop).Round(time.Millisecond))
		}
	}
	return fmt.Sprintf("run %s: workflow task %s timed out at event %d, %v after it was scheduled; taken by %s",
		runID, a.GetTimeoutType(), ev.GetEventId(), ev.GetEventTime().AsTime().Sub(at).Round(time.Millisecond), who)
}

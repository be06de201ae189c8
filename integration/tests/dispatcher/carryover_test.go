package dispatcher_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/takeover"
)

// A run terminated by a takeover with a backlog of signalled requests it never handled (no worker
// ran its tasks, as when its owner's process died) hands them to the successor's run: every one is
// handled exactly once, by the successor.
func TestTakeoverCarriesOverSignalledBacklog(t *testing.T) {
	e := newEnv(t)
	const n = 40
	runA, termA := e.take(t, "node-a")
	var keys []string
	for i := range n {
		r := request(fmt.Sprintf("backlog-%d", i))
		keys = append(keys, r.Key())
		e.signal(t, r)
	}
	// node-a goes away; node-b wins and takes over, terminating run A with its backlog.
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	runB, _ := e.take(t, "node-b")
	if runB.Owner.PriorRunID != runA.RunID || runB.Path != takeover.PathTerminateFirst {
		t.Fatalf("run B = %+v, want it to have terminated run A %s", runB, runA.RunID)
	}
	// A small page, so the backlog is read in several Backlog activities.
	h := &handled{}
	e.workerWith(t, h, dispatcher.RegisterOptions{BacklogPage: 7})

	recs := e.waitDone(t, keys)
	st := e.state(t, e.runOf(t, runB), func(s dispatcher.State) bool { return s.Dispatched == n && len(s.Backlog) == 0 })
	if st.CarriedOver != n {
		t.Errorf("state %+v, want %d carried over", st, n)
	}
	onceEach(t, h, keys)
	for _, c := range h.snapshot() {
		if c.owner.Token != runB.Owner.Token {
			t.Errorf("key %s handled by %s at token %d, want node-b's run", c.key, c.owner.ServerID, c.owner.Token)
		}
	}
	for _, k := range keys {
		if recs[k] != record("done", runB.Owner) {
			t.Errorf("record %s = %q, want done by node-b", k, recs[k])
		}
	}
}

// A dispatch whose ledger record stayed pending because its run was terminated mid-activity is
// finished by the next owner's run, which carries the request over: the key ends done by the next
// owner, and the old owner's late attempt writes nothing.
func TestPendingDispatchOfTerminatedRunIsFinished(t *testing.T) {
	e := newEnv(t)
	req := request("mid-activity")
	h, release, runA, termA := e.heldInNodeA(t, req)
	if got := e.records(t)[req.Key()]; got != record("pending", runA.Owner) {
		t.Fatalf("record %q, want pending for node-a", got)
	}
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	runB, _ := e.take(t, "node-b")

	recs := e.waitDone(t, []string{req.Key()})
	if recs[req.Key()] != record("done", runB.Owner) {
		t.Fatalf("record %q, want done by node-b", recs[req.Key()])
	}
	// node-a's attempt finishes late: its Complete is refused, the record stays node-b's. node-b's
	// run counts the key dispatched, or a duplicate when the activity that completed it was retried
	// (its result lost to a timeout on a loaded machine): the handler ran once either way (below).
	close(release)
	e.state(t, e.runOf(t, runB), func(s dispatcher.State) bool { return s.Dispatched+s.Duplicates == 1 })
	if got := e.records(t)[req.Key()]; got != record("done", runB.Owner) {
		t.Fatalf("record %q after node-a's late attempt, want done by node-b", got)
	}
	var byB int
	for _, c := range h.snapshot() {
		if c.owner.Token == runB.Owner.Token {
			byB++
		}
	}
	if byB != 1 {
		t.Fatalf("node-b handled the key %d times, want once; calls %+v", byB, h.snapshot())
	}
}

// A run that continues as new while requests arrive faster than it hands them out carries what
// waits to the next run of its chain: every request is handled once.
func TestContinueAsNewWithBacklog(t *testing.T) {
	e := newEnv(t)
	const n = 120
	run, _ := e.take(t, "node-a")
	var keys []string
	for i := range n {
		r := request(fmt.Sprintf("can-%d", i))
		keys = append(keys, r.Key())
		e.signal(t, r)
	}
	// The backlog is there before the worker starts; a small history limit makes the chain continue
	// as new several times while most of it still waits.
	h := &handled{}
	e.workerWith(t, h, dispatcher.RegisterOptions{HistoryLimit: 60, MaxConcurrent: 4})
	e.waitDone(t, keys)
	onceEach(t, h, keys)
	// The chain's current run (no run ID) carries the chain's counts.
	st := e.state(t, e.runOf(t, takeover.Run{WorkflowID: run.WorkflowID}), func(s dispatcher.State) bool { return s.Dispatched == n })
	if st.Generation == 0 {
		t.Fatalf("state %+v: the chain never continued as new", st)
	}
	// The continued run keeps the workflow task timeout the takeover set on the first.
	d, err := e.tc.DescribeWorkflowExecution(t.Context(), run.WorkflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := d.GetExecutionConfig().GetDefaultWorkflowTaskTimeout().AsDuration(); d.GetWorkflowExecutionInfo().GetExecution().GetRunId() == run.RunID ||
		got != takeover.DefaultWorkflowTaskTimeout {
		t.Fatalf("the chain's current run %s has workflow task timeout %v, want %v (first run %s)",
			d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), got, takeover.DefaultWorkflowTaskTimeout, run.RunID)
	}
}

// slowHistory delays every read of a run's history or listing: a carry-over page that stays in
// flight while the run's history grows.
type slowHistory struct {
	client.Client
	delay time.Duration
}

func (s slowHistory) GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool,
	filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	time.Sleep(s.delay)
	return s.Client.GetWorkflowHistory(ctx, workflowID, runID, isLongPoll, filterType)
}

func (s slowHistory) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	time.Sleep(s.delay)
	return s.Client.ListWorkflow(ctx, req)
}

// A run never continues as new with a backlog page in flight: on a server that suggests
// continue-as-new after 6 events, with a history limit of 12, a slow carry-over and requests
// arriving all the while, every request the prior run accepted and every new one is handled once.
func TestContinueAsNewNeverOutrunsTheBacklog(t *testing.T) {
	srv := temporalx.Start(t, temporalx.Options{DynamicConfig: map[string]any{
		"matching.numTaskqueueReadPartitions":     1,
		"matching.numTaskqueueWritePartitions":    1,
		"limit.historyCount.suggestContinueAsNew": 6,
	}})
	e := newEnvOn(t, srv)
	e.historyReader = slowHistory{Client: e.tc, delay: 300 * time.Millisecond}
	_, termA := e.take(t, "node-a")
	var keys []string
	for i := range 3 {
		r := request(fmt.Sprintf("carried-%d", i))
		keys = append(keys, r.Key())
		e.signal(t, r)
	}
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	runB, _ := e.take(t, "node-b")
	h := &handled{}
	e.workerWith(t, h, dispatcher.RegisterOptions{HistoryLimit: 12})
	// New requests keep the run's history growing while its carry-over is read.
	for i := range 30 {
		r := request(fmt.Sprintf("new-%d", i))
		keys = append(keys, r.Key())
		e.signal(t, r)
		time.Sleep(50 * time.Millisecond)
	}
	recs := e.waitDone(t, keys)
	onceEach(t, h, keys)
	for _, k := range keys[:3] {
		if recs[k] != record("done", runB.Owner) {
			t.Errorf("carried record %s = %q, want done by node-b", k, recs[k])
		}
	}
	st := e.state(t, e.runOf(t, takeover.Run{WorkflowID: runB.WorkflowID}), func(s dispatcher.State) bool {
		return s.Dispatched == int64(len(keys))
	})
	if st.Generation == 0 {
		t.Errorf("state %+v: the chain never continued as new", st)
	}
}

// A planned step-down lets the dispatch in its run's handler finish before it ends the run: the
// request is completed by the stepping-down owner, under its term, and the successor does not run
// it again. (Before, the run was terminated at once, the handler finished after the term was
// resigned, its ledger Complete was refused and the successor handled the request a second time.)
func TestPlannedStepDownRunsNoHandlerTwice(t *testing.T) {
	e := newEnv(t)
	req := request("in-the-handler")
	h, release, runA, termA := e.heldInNodeA(t, req)
	// The handler finishes once the step-down has asked the run to quiesce (the run accepted the
	// update), or, where nothing asks, once node-a's term is over: either way after the step-down
	// began, never by a guess at its timing.
	resigned := make(chan struct{})
	var releaser sync.WaitGroup
	releaser.Go(func() {
		defer close(release)
		for {
			if e.updateAccepted(t, runA, takeover.UpdateQuiesce) {
				return
			}
			select {
			case <-resigned:
				return
			case <-t.Context().Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	err := e.manager(t, "node-a").StepDown(ctx, termA, runA)
	if err == nil {
		err = termA.Resign(t.Context())
	}
	close(resigned)
	releaser.Wait()
	if err != nil {
		t.Fatal(err)
	}
	runB, _ := e.take(t, "node-b")
	e.waitDone(t, []string{req.Key()})
	// Give node-b's carry-over the time to run it again, were it going to.
	e.state(t, e.runOf(t, runB), func(s dispatcher.State) bool { return len(s.Backlog) == 0 })
	if got := e.records(t)[req.Key()]; got != record("done", runA.Owner) {
		t.Errorf("record %q, want done by node-a, whose handler finished before its run ended", got)
	}
	if n := h.perKey()[req.Key()]; n != 1 {
		t.Errorf("handler ran %d times across a planned step-down, want once; calls %+v", n, h.snapshot())
	}
	// The stepping-down run ended terminated, as before.
	desc, err := e.tc.DescribeWorkflowExecution(t.Context(), runA.WorkflowID, runA.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Errorf("node-a's run is %v after its step-down, want terminated", st)
	}
}

// heldInNodeA runs a worker whose handler holds node-a's dispatches (holdNodeA), makes node-a the
// owner, sends req and returns once node-a's handler holds it: the handler, the channel that
// releases it, and node-a's run and term.
func (e *env) heldInNodeA(t *testing.T, req dispatcher.Request) (*handled, chan struct{}, takeover.Run, *election.Term) {
	t.Helper()
	h, started, release := holdNodeA()
	e.workerWith(t, h, dispatcher.RegisterOptions{})
	runA, termA := e.take(t, "node-a")
	e.signal(t, req)
	select {
	case <-started:
	case <-t.Context().Done():
		t.Fatal("node-a's dispatch never started")
	}
	return h, release, runA, termA
}

// updateAccepted reports whether run's history shows an accepted update named name.
func (e *env) updateAccepted(t *testing.T, run takeover.Run, name string) bool {
	t.Helper()
	iter := e.tc.GetWorkflowHistory(t.Context(), run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return false
		}
		if a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes(); a != nil && a.GetAcceptedRequest().GetInput().GetName() == name {
			return true
		}
	}
	return false
}

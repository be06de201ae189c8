package takeover_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// 1. A restart replaces the stale dispatcher within one attempt; history shows the termination, by
// the new owner, preceding the new run.
func TestRestartReplacesStaleDispatcher(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name string
		mode takeover.StartMode
	}{{"execute", takeover.StartExecute}, {"signal-with-start", takeover.StartSignalWithStart}} {
		t.Run(mode.name, func(t *testing.T) {
			e := newEnv(t)
			e.worker(t, "orders")
			cfg := takeover.Config{Mode: mode.mode, StepDown: takeover.LeaveRunning}
			a := e.node(t, "node-a", election.Config{}, cfg)
			b := e.node(t, "node-b", election.Config{}, cfg)

			termA := a.campaign(t, "orders")
			runA, err := a.mgr.Take(t.Context(), termA)
			if err != nil {
				t.Fatal(err)
			}
			if runA.WorkflowID != "dispatcher-billing-orders" || runA.Path != takeover.PathStart || runA.Owner.Token != termA.Token() {
				t.Fatalf("first takeover: %+v", runA)
			}
			olderThanReuseInterval(e.describe(t, runA.WorkflowID, runA.RunID).start)

			// node-a restarts: it resigns and leaves its run behind, as a process that dies would.
			if err := termA.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			termB := b.campaign(t, "orders")
			runB, err := b.mgr.Take(t.Context(), termB)
			if err != nil {
				t.Fatal(err)
			}
			if runB.Attempts != 1 || runB.Path != takeover.PathTerminateFirst || runB.Owner.PriorRunID != runA.RunID {
				t.Fatalf("want one attempt on the terminate-first path, got %+v", runB)
			}
			old := e.describe(t, runA.WorkflowID, runA.RunID)
			cur := e.describe(t, runB.WorkflowID, runB.RunID)
			if old.status != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED || cur.status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Fatalf("old run %v, new run %v", old.status, cur.status)
			}
			if old.close.After(cur.start) {
				t.Fatalf("old run closed at %v, after the new run started at %v", old.close, cur.start)
			}
			reason := e.closeEvent(t, runA.WorkflowID, runA.RunID).GetWorkflowExecutionTerminatedEventAttributes().GetReason()
			if r, _ := takeover.ParseReason(reason); r.Kind != takeover.ReasonTakenOver || r.By != "node-b" || r.Token != termB.Token() {
				t.Fatalf("termination reason %q does not name the new owner and token", reason)
			}
			if runs := e.runsOf(t, runA.WorkflowID, 2); len(runs) != 2 {
				t.Fatalf("want exactly 2 runs, got %d", len(runs))
			}
			t.Logf("takeover latency %v (term start -> new run open)", runB.Latency)
		})
	}
}

// 2. A run of an older deployment (no owner memo), taken over by a Manager in legacy mode (no conflict
// policy on the start): it counts as token 0, is terminated by run ID, then replaced in one attempt.
func TestLegacyAlreadyStartedIsTerminatedThenReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker(t, "orders")
	id, _ := takeover.WorkflowID(project, "orders")
	legacyRun, err := e.tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: "orders"},
		dispatcher.WorkflowName, takeover.Owner{Project: project, Queue: "orders", ServerID: "old-deployment"})
	if err != nil {
		t.Fatal(err)
	}
	olderThanReuseInterval(e.describe(t, id, legacyRun.GetRunID()).start)

	a := e.node(t, "node-a", election.Config{}, takeover.Config{Legacy: true})
	term := a.campaign(t, "orders")
	run, err := a.mgr.Take(t.Context(), term)
	if err != nil {
		t.Fatal(err)
	}
	if run.Path != takeover.PathTerminateFirst || run.Attempts != 1 {
		t.Fatalf("want one attempt on the terminate-first path, got %+v", run)
	}
	if st := e.describe(t, id, legacyRun.GetRunID()).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("legacy run is %v", st)
	}
	reason := e.closeEvent(t, id, legacyRun.GetRunID()).GetWorkflowExecutionTerminatedEventAttributes().GetReason()
	if r, _ := takeover.ParseReason(reason); r.Kind != takeover.ReasonTakenOver || r.By != "node-a" {
		t.Fatalf("termination reason %q does not name the new owner", reason)
	}
	if st := e.describe(t, id, run.RunID).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("new run is %v", st)
	}
}

// 3. A superseded leader attempting takeover or step-down terminates nothing.
func TestSupersededLeaderTerminatesNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.worker(t, "orders")
	a := e.node(t, "node-a", election.Config{}, takeover.Config{})
	b := e.node(t, "node-b", election.Config{}, takeover.Config{})
	operator := etcdClient(t, e)

	termA := a.campaign(t, "orders")
	runA, err := a.mgr.Take(t.Context(), termA)
	if err != nil {
		t.Fatal(err)
	}
	olderThanReuseInterval(e.describe(t, runA.WorkflowID, runA.RunID).start)
	bTerms := make(chan *election.Term, 1)
	go func() {
		term, err := b.el.Campaign(t.Context(), project, "orders", b.id)
		if err != nil {
			t.Error(err)
		}
		bTerms <- term
	}()
	// node-a is superseded behind its back: an operator revokes its lease.
	revokeLeaseOf(t, operator, termA.Key())
	termB := <-bTerms
	if termB == nil {
		t.FailNow()
	}
	runB, err := b.mgr.Take(t.Context(), termB)
	if err != nil {
		t.Fatal(err)
	}
	<-termA.Done()

	if _, err := a.mgr.Take(t.Context(), termA); !errors.Is(err, takeover.ErrSuperseded) {
		t.Fatalf("stale takeover = %v, want ErrSuperseded", err)
	}
	if err := a.mgr.StepDown(t.Context(), termA, runA); !errors.Is(err, takeover.ErrSuperseded) {
		t.Fatalf("stale step-down = %v, want ErrSuperseded", err)
	}
	if st := e.describe(t, runB.WorkflowID, runB.RunID).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the successor's run is %v after a stale takeover and step-down", st)
	}
	if runs := e.runsOf(t, runB.WorkflowID, 2); len(runs) != 2 {
		t.Fatalf("a stale takeover started a run: %d runs", len(runs))
	}
	// The live owner's own step-down terminates exactly its run.
	if err := b.mgr.StepDown(t.Context(), termB, runB); err != nil {
		t.Fatal(err)
	}
	if st := e.describe(t, runB.WorkflowID, runB.RunID).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("step-down left the run %v", st)
	}
}

// 5. Duplicate dispatch keys, sent twice and once more after a takeover, are processed once.
func TestDuplicateDispatchAcrossTakeover(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	h := e.worker(t, "orders")
	cfg := takeover.Config{StepDown: takeover.LeaveRunning}
	a := e.node(t, "node-a", election.Config{}, cfg)
	b := e.node(t, "node-b", election.Config{}, cfg)
	req := dispatcher.Request{Type: "invoice", TaskID: "task-42", PayloadSHA256: strings.Repeat("0f", 32), Parent: "session-7"}

	termA := a.campaign(t, "orders")
	runA, err := a.mgr.Take(t.Context(), termA)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := e.tc.SignalWorkflow(t.Context(), runA.WorkflowID, runA.RunID, dispatcher.SignalDispatch, req); err != nil {
			t.Fatal(err)
		}
	}
	stA := waitState(t, e, runA, func(s dispatcher.State) bool { return s.Dispatched+s.Duplicates == 2 })
	if stA.Dispatched != 1 || stA.Duplicates != 1 {
		t.Fatalf("first run: %+v", stA)
	}
	olderThanReuseInterval(e.describe(t, runA.WorkflowID, runA.RunID).start)
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	termB := b.campaign(t, "orders")
	runB, err := b.mgr.Take(t.Context(), termB)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.tc.SignalWorkflow(t.Context(), runB.WorkflowID, runB.RunID, dispatcher.SignalDispatch, req); err != nil {
		t.Fatal(err)
	}
	stB := waitState(t, e, runB, func(s dispatcher.State) bool { return s.Dispatched+s.Duplicates == 1 })
	if stB.Dispatched != 0 || stB.Duplicates != 1 {
		t.Fatalf("the new run dispatched a request the old run had handled: %+v", stB)
	}
	if n := h.count(req.Key()); n != 1 {
		t.Fatalf("handler called %d times for one dispatch key", n)
	}
}

func waitState(t *testing.T, e *env, run takeover.Run, ok func(dispatcher.State) bool) dispatcher.State {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var st dispatcher.State
		v, err := e.tc.QueryWorkflow(t.Context(), run.WorkflowID, run.RunID, dispatcher.QueryState)
		if err == nil {
			err = v.Get(&st)
		}
		if err == nil && ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("dispatcher state never reached the expected counts: %+v (%v)", st, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// 6. Temporal down: a clear error after bounded attempts, no panic, and the term is released: Run
// resigns when OnElected fails, so another node can lead.
func TestTemporalDownReleasesTheTerm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	if e.temporal.External() {
		t.Skip("BATON_TEMPORAL_ADDRESS is set: cannot stop an external Temporal")
	}
	a := e.node(t, "node-a", election.Config{}, takeover.Config{MaxAttempts: 3, AttemptTimeout: 500 * time.Millisecond,
		RetryMin: 50 * time.Millisecond, RetryMax: 100 * time.Millisecond})
	if err := e.temporal.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	type outcome struct {
		term  *election.Term
		err   error
		took  time.Duration
		cause error
	}
	out := make(chan outcome, 1)
	var wg sync.WaitGroup
	wg.Go(func() {
		var o outcome
		_ = a.el.Run(ctx, project, "orders", a.id, election.Callbacks{
			OnElected: func(ctx context.Context, term *election.Term) error {
				start := time.Now()
				_, err := a.mgr.Take(ctx, term)
				o.term, o.err, o.took = term, err, time.Since(start)
				return err
			},
			OnStepDown: func(term *election.Term, cause error) {
				o.cause = cause
				out <- o
				cancel()
			},
		})
	})
	var o outcome
	select {
	case o = <-out:
	case <-time.After(30 * time.Second):
		t.Fatal("takeover against a stopped Temporal did not give up")
	}
	wg.Wait()
	if !errors.Is(o.err, takeover.ErrFailed) || !strings.Contains(o.err.Error(), "dispatcher-billing-orders") {
		t.Fatalf("takeover error = %v, want ErrFailed naming the workflow", o.err)
	}
	if o.took > 10*time.Second {
		t.Fatalf("takeover gave up after %v; 3 attempts of 500 ms should not take that long", o.took)
	}
	if !errors.Is(o.cause, election.ErrResigned) {
		t.Fatalf("term ended with %v, want ErrResigned", o.cause)
	}
	if _, err := a.el.Leader(t.Context(), project, "orders"); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("the failed leader's key is still in etcd: %v", err)
	}
	t.Logf("takeover against a stopped Temporal: %v after %v", o.err, o.took)
}

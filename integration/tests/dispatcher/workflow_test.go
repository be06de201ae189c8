package dispatcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/ledger"
)

// A run whose owner was superseded (a successor won while the run still runs) dispatches nothing:
// its activity writes nothing to the ledger, calls no handler and fails at once without retrying.
func TestSupersededRunDispatchesNothing(t *testing.T) {
	e := newEnv(t)
	h := e.worker(t)
	a, termA := e.ownerOf(t, "node-a")
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, _ := e.ownerOf(t, "node-b")
	if err := ledger.ConfirmOwner(t.Context(), e.cli, b); err != nil {
		t.Fatal(err)
	}

	run := e.start(t, a)
	if err := e.tc.SignalWorkflow(t.Context(), run.GetID(), run.GetRunID(), dispatcher.SignalDispatch, request("t1")); err != nil {
		t.Fatal(err)
	}
	failed, attempt := e.activityOutcome(t, run)
	if failed == nil {
		t.Fatalf("the superseded owner's dispatch completed; handler calls %+v, records %v", h.snapshot(), e.records(t))
	}
	info := failed.GetFailure().GetApplicationFailureInfo()
	if info.GetType() != dispatcher.ErrTypeSuperseded || !info.GetNonRetryable() || attempt != 1 {
		t.Fatalf("activity failed with %v (type %q, non-retryable %v) at attempt %d; want %s, non-retryable, attempt 1",
			failed.GetFailure().GetMessage(), info.GetType(), info.GetNonRetryable(), attempt, dispatcher.ErrTypeSuperseded)
	}
	if calls := h.snapshot(); len(calls) != 0 {
		t.Fatalf("handler called by a superseded owner: %+v", calls)
	}
	if got := e.records(t); len(got) != 0 {
		t.Fatalf("ledger records %v, want none", got)
	}
	if st := e.state(t, run, func(dispatcher.State) bool { return true }); st.Dispatched != 0 || st.Duplicates != 0 {
		t.Fatalf("state %+v, want nothing dispatched", st)
	}
}

// A dispatch left pending by an owner that died mid-activity (its run was terminated before
// Complete) is taken over and finished by the next owner's run when the request is sent again.
func TestDeadOwnersPendingDispatchIsFinishedByTheNext(t *testing.T) {
	e := newEnv(t)
	h := e.worker(t)
	req := request("t1")
	a, termA := e.ownerOf(t, "node-a")
	// What the dead owner's activity got to before its run was terminated.
	if done, err := e.ledger(t).Begin(t.Context(), req.Key(), a); err != nil || done {
		t.Fatalf("Begin = %v, %v", done, err)
	}
	// node-a dies: its lease is gone, and node-b wins.
	resp, err := e.cli.Get(t.Context(), a.ElectionKey)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("get %s: %v %v", a.ElectionKey, resp, err)
	}
	if _, err := e.cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	<-termA.Done()
	b, _ := e.ownerOf(t, "node-b")

	run := e.start(t, b)
	if err := e.tc.SignalWorkflow(t.Context(), run.GetID(), run.GetRunID(), dispatcher.SignalDispatch, req); err != nil {
		t.Fatal(err)
	}
	st := e.state(t, run, func(s dispatcher.State) bool { return s.Dispatched+s.Duplicates == 1 })
	if st.Dispatched != 1 {
		t.Fatalf("state %+v, want the pending request dispatched", st)
	}
	calls := h.snapshot()
	if len(calls) != 1 || calls[0].key != req.Key() || calls[0].owner.ServerID != b.ServerID || calls[0].owner.Token != b.Token || calls[0].owner.ElectionKey != b.ElectionKey {
		t.Fatalf("handler calls %+v, want one by node-b", calls)
	}
	if got := e.records(t)[req.Key()]; got != record("done", b) {
		t.Fatalf("record %q, want %q", got, record("done", b))
	}
}

// An operator's cancel closes the run as Canceled within seconds, not when a signal next arrives.
func TestOperatorCancelClosesTheRun(t *testing.T) {
	e := newEnv(t)
	e.worker(t)
	o, _ := e.ownerOf(t, "node-a")
	run := e.start(t, o)
	if err := e.tc.CancelWorkflow(t.Context(), run.GetID(), run.GetRunID()); err != nil {
		t.Fatal(err)
	}
	// Generous for a loaded machine: the old code never closed the run at all.
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := run.Get(ctx, nil)
	var canceled *temporal.CanceledError
	if !errors.As(err, &canceled) {
		t.Fatalf("run ended with %v, want Canceled", err)
	}
	desc, err := e.tc.DescribeWorkflowExecution(t.Context(), run.GetID(), run.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED {
		t.Fatalf("run status %v, want Canceled", st)
	}
}

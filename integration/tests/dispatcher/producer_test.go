package dispatcher_test

import (
	"context"
	"errors"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/dispatcher"
)

func (e *env) producer(t *testing.T) *dispatcher.Producer {
	t.Helper()
	p, err := dispatcher.NewProducer(e.tc, dispatcher.ProducerConfig{Logger: zaptest.NewLogger(t).Named("producer")})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Dispatch returns once the request is recorded handled; the same request again is not handled
// again (the run answers the same update ID with the first outcome).
func TestDispatchReturnsWhenHandled(t *testing.T) {
	e := newEnv(t)
	h := e.worker(t)
	run, _ := e.take(t, "node-a")
	p := e.producer(t)
	req := request("safe")
	res, err := p.Dispatch(t.Context(), project, e.queue, req)
	if err != nil || res.Duplicate {
		t.Fatalf("Dispatch = %+v, %v; want handled", res, err)
	}
	// Returned means recorded: no waiting here.
	if got := e.records(t)[req.Key()]; got != record("done", run.Owner) {
		t.Fatalf("record %q when Dispatch returned, want done", got)
	}
	if _, err := p.Dispatch(t.Context(), project, e.queue, req); err != nil {
		t.Fatalf("second Dispatch = %v", err)
	}
	onceEach(t, h, []string{req.Key()})
}

// A Dispatch that the old run accepted and was handling when a takeover terminated it returns
// after the new run handled the request: once, by the new owner.
func TestDispatchAcrossTakeover(t *testing.T) {
	e := newEnv(t)
	req := request("across")
	h, started, release := holdNodeA()
	e.workerWith(t, h, dispatcher.RegisterOptions{})
	defer close(release)
	_, termA := e.take(t, "node-a")
	p := e.producer(t)

	type outcome struct {
		res dispatcher.Result
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := p.Dispatch(t.Context(), project, e.queue, req)
		done <- outcome{res, err}
	}()
	select {
	case <-started: // node-a's run accepted the update and its dispatch is in flight
	case o := <-done:
		t.Fatalf("Dispatch returned %+v before the takeover", o)
	}
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	runB, _ := e.take(t, "node-b")
	o := <-done
	if o.err != nil {
		t.Fatalf("Dispatch across the takeover = %v", o.err)
	}
	if got := e.records(t)[req.Key()]; got != record("done", runB.Owner) {
		t.Fatalf("record %q when Dispatch returned, want done by node-b", got)
	}
	var byB int
	for _, c := range h.snapshot() {
		if c.owner.Token == runB.Owner.Token {
			byB++
		}
	}
	if byB != 1 {
		t.Fatalf("node-b handled the request %d times, want once", byB)
	}
}

// A request that breaks the rules is refused at once, before anything is sent; the workflow's
// validator refuses one sent as a raw update without leaving an event in the history.
func TestDispatchInvalidRequest(t *testing.T) {
	e := newEnv(t)
	p := e.producer(t)
	bad := dispatcher.Request{Type: "invoice", TaskID: "t1", PayloadSHA256: "not-a-digest"}
	// No run is open: only a refusal without a round trip returns before this context ends.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	_, err := p.Dispatch(ctx, project, e.queue, bad)
	if !errors.Is(err, dispatcher.ErrInvalidRequest) || errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("Dispatch(invalid) = %v, want ErrInvalidRequest at once", err)
	}

	e.worker(t)
	run, _ := e.take(t, "node-a")
	h, err := e.tc.UpdateWorkflow(t.Context(), client.UpdateWorkflowOptions{WorkflowID: run.WorkflowID, UpdateID: "bad",
		UpdateName: dispatcher.UpdateDispatch, Args: []any{bad}, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(t.Context(), nil)
	}
	if err == nil {
		t.Fatal("the workflow accepted an invalid update")
	}
	iter := e.tc.GetWorkflowHistory(t.Context(), run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetWorkflowExecutionUpdateAcceptedEventAttributes() != nil || ev.GetWorkflowExecutionUpdateCompletedEventAttributes() != nil {
			t.Fatalf("a rejected update left event %d (%v) in the history", ev.GetEventId(), ev.GetEventType())
		}
	}
}

// While no dispatcher runs, Dispatch retries until its context ends, and says so.
func TestDispatchTimesOut(t *testing.T) {
	e := newEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	_, err := e.producer(t).Dispatch(ctx, project, e.queue, request("nobody"))
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, dispatcher.ErrInvalidRequest) {
		t.Fatalf("Dispatch without a dispatcher = %v, want the context's deadline", err)
	}
}

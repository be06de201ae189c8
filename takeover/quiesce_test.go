package takeover

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/clock"
)

// heldTerm is a term that holds throughout.
type heldTerm struct{ token int64 }

func (heldTerm) Project() string               { return "billing" }
func (heldTerm) Queue() string                 { return "orders" }
func (heldTerm) LeaderID() string              { return "node-a" }
func (heldTerm) Key() string                   { return "/baton/election/billing/orders/1" }
func (t heldTerm) Token() int64                { return t.token }
func (heldTerm) Started() time.Time            { return time.Time{} }
func (heldTerm) Context() context.Context      { return context.Background() }
func (heldTerm) Check() error                  { return nil }
func (heldTerm) Confirm(context.Context) error { return nil }

// unansweredQuiesce is a Temporal client whose UpdateWorkflow never gets an answer (the run is not
// served, or the update waits behind others): each call waits for its context.
type unansweredQuiesce struct {
	Client
	calls atomic.Int32
}

func (c *unansweredQuiesce) UpdateWorkflow(ctx context.Context, _ client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.calls.Add(1)
	<-ctx.Done()
	return nil, ctx.Err()
}

// The calls of one term share one QuiesceTimeout: a Node.Quiesce that timed out is not waited for
// again by the step-down that follows (a stop under load waited twice, and outlasted its deadline);
// another term gets a bound of its own.
func TestQuiesceBoundIsPerTerm(t *testing.T) {
	c := &unansweredQuiesce{}
	m, err := New(c, Config{QuiesceTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	term := heldTerm{token: 7}
	run := Run{WorkflowID: "dispatcher-billing-orders", RunID: "r1", Owner: Owner{Token: 7}}
	m.Quiesce(t.Context(), term, run)
	m.Quiesce(t.Context(), term, run)
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("the term's second quiesce asked again (%d calls): it must find the bound used up", n)
	}
	next := heldTerm{token: 9}
	m.Quiesce(t.Context(), next, Run{WorkflowID: run.WorkflowID, RunID: "r2", Owner: Owner{Token: 9}})
	if n := c.calls.Load(); n != 2 {
		t.Fatalf("a new term's quiesce was not sent (%d calls)", n)
	}
}

// answeredQuiesce is a Temporal client whose UpdateWorkflow completes at once.
type answeredQuiesce struct {
	Client
	calls atomic.Int32
}

func (c *answeredQuiesce) UpdateWorkflow(context.Context, client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.calls.Add(1)
	return doneUpdate{}, nil
}

// doneUpdate is the handle of a completed update.
type doneUpdate struct{ client.WorkflowUpdateHandle }

func (doneUpdate) Get(context.Context, any) error { return nil }

// A run quiesced by the Node's Quiesce is not asked again by its step-down: a stop of many queues
// would send a second update per queue for nothing.
func TestQuiescedRunIsNotAskedAgain(t *testing.T) {
	c := &answeredQuiesce{}
	m, err := New(c, Config{QuiesceTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	term := heldTerm{token: 7}
	run := Run{WorkflowID: "dispatcher-billing-orders", RunID: "r1", Owner: Owner{Token: 7}}
	m.Quiesce(t.Context(), term, run)
	m.Quiesce(t.Context(), term, run)
	if n := c.calls.Load(); n != 1 {
		t.Fatalf("a quiesced run was asked %d times, want once", n)
	}
}

// deadlineCtx is a context whose deadline is given, not set on the wall clock.
type deadlineCtx struct {
	context.Context
	deadline time.Time
}

func (c deadlineCtx) Deadline() (time.Time, bool) { return c.deadline, true }

// boundQuiesce is a Temporal client whose UpdateWorkflow records how long its context gives it,
// and completes at once.
type boundQuiesce struct {
	Client
	calls atomic.Int32
	given atomic.Int64 // time.Duration
}

func (c *boundQuiesce) UpdateWorkflow(ctx context.Context, _ client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	c.calls.Add(1)
	if d, ok := ctx.Deadline(); ok {
		c.given.Store(int64(time.Until(d)))
	}
	return doneUpdate{}, nil
}

// What is left of the caller's deadline is read on the manager's clock, not the wall's: a step-down
// on a Fake with 1.5 s left on the Fake's time waits half of that, not the whole QuiesceTimeout
// (Quiesce once read time.Until, found the Fake's deadline decades away, and waited up to a minute).
func TestQuiesceReadsDeadlineOnItsClock(t *testing.T) {
	fake := clock.NewFake(time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC))
	c := &boundQuiesce{}
	m, err := New(c, Config{QuiesceTimeout: time.Minute, Clock: fake})
	if err != nil {
		t.Fatal(err)
	}
	ctx := deadlineCtx{Context: t.Context(), deadline: fake.Now().Add(2*StepDownReserve - StepDownReserve/2)}
	m.Quiesce(ctx, heldTerm{token: 7}, Run{WorkflowID: "dispatcher-billing-orders", RunID: "r1", Owner: Owner{Token: 7}})
	if c.calls.Load() != 1 {
		t.Fatalf("quiesce sent %d updates, want 1", c.calls.Load())
	}
	// Half of 1.5 s is due; anything near the minute means the wall clock was read.
	if given := time.Duration(c.given.Load()); given <= 0 || given > 30*time.Second {
		t.Fatalf("the quiesce was given %v, want about %v (half of what is left on the manager's clock)", given, StepDownReserve*3/4)
	}
}

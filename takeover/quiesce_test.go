package takeover

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
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

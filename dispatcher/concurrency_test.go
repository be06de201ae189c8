package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/takeover"
)

// gate is a handler that tracks how many calls run at once and holds each until want of them run
// together (or a generous bound passes, so a wrong bound fails the test instead of hanging it).
type gate struct {
	mu       sync.Mutex
	cur, max int
	want     int
	all      chan struct{}
	calls    int
}

func (g *gate) handle(ctx context.Context, _ string, _ Request, _ takeover.Owner) error {
	g.mu.Lock()
	g.cur++
	g.calls++
	g.max = max(g.max, g.cur)
	if g.cur == g.want {
		close(g.all)
		g.all = make(chan struct{})
	}
	all := g.all
	g.mu.Unlock()
	select {
	case <-all:
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	g.mu.Lock()
	g.cur--
	g.mu.Unlock()
	return nil
}

// A run handles requests concurrently, never more than MaxConcurrent at a time.
func TestConcurrencyIsBounded(t *testing.T) {
	g := &gate{want: 3, all: make(chan struct{})}
	env := newSuiteEnv()
	if err := RegisterWithOptions(env, &Activities{Ledger: &memLedger{}, Handler: g.handle, History: firstRun{}}, RegisterOptions{MaxConcurrent: 3}); err != nil {
		t.Fatal(err)
	}
	const n = 12
	env.RegisterDelayedCallback(func() {
		for i := range n {
			env.SignalWorkflow(SignalDispatch, req(fmt.Sprintf("c%d", i)))
		}
	}, time.Second)
	var state State
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryState)
		if err == nil {
			err = v.Get(&state)
		}
		if err != nil {
			t.Error(err)
		}
		env.CancelWorkflow()
	}, time.Hour)
	env.ExecuteWorkflow(WorkflowName, owner)
	if g.max != 3 || g.calls != n || state.Dispatched != n {
		t.Fatalf("at most %d handlers ran at once (want 3), %d calls, state %+v; want %d dispatched", g.max, g.calls, state, n)
	}
}

// A run that must continue as new while requests wait finishes those in flight and passes the
// waiting ones in the next run's input, which handles them first.
func TestContinueAsNewCarriesWaitingRequests(t *testing.T) {
	ledger, h := &memLedger{}, &countingHandler{}
	release := make(chan struct{})
	env := newSuiteEnv()
	held := func(ctx context.Context, key string, r Request, o takeover.Owner) error {
		select { // the first dispatches are in flight when the history passes the limit
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return h.handle(ctx, key, r, o)
	}
	Register(env, &Activities{Ledger: ledger, Handler: held, History: firstRun{}})
	const n = 6
	env.RegisterDelayedCallback(func() {
		for i := range n {
			env.SignalWorkflow(SignalDispatch, req(fmt.Sprintf("w%d", i)))
		}
	}, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SetCurrentHistoryLength(41)
		close(release)
	}, time.Second+time.Millisecond)
	env.ExecuteWorkflow(WorkflowName, Input{Owner: owner, HistoryLimit: 40, MaxConcurrent: 2})
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow ended with %v, want continue-as-new", err)
	}
	var next Input
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.Carry == nil || next.Carry.Dispatched != 2 || len(next.Carry.Pending) != n-2 || len(h.seen()) != 2 {
		t.Fatalf("carried %+v after %d handled, want 2 dispatched and %d pending", next.Carry, len(h.seen()), n-2)
	}

	// The next run of the chain handles what was carried, and nothing twice.
	env2 := newEnv(t, ledger, h)
	env2.RegisterDelayedCallback(env2.CancelWorkflow, time.Hour)
	env2.ExecuteWorkflow(WorkflowName, next)
	if len(h.seen()) != n {
		t.Fatalf("handler saw %d keys after the next run, want %d", len(h.seen()), n)
	}
	for k, c := range h.seen() {
		if c != 1 {
			t.Errorf("key %s handled %d times", k, c)
		}
	}
}

// The dispatch update returns when the request is handled; its validator rejects an invalid
// request before it is accepted.
func TestDispatchUpdate(t *testing.T) {
	env := newEnv(t, &memLedger{}, &countingHandler{})
	type outcome struct {
		rejected, accepted bool
		res                Result
		err                error
	}
	send := func(id string, r Request, o *outcome) {
		env.UpdateWorkflow(UpdateDispatch, id, &testUpdate{
			reject:   func(err error) { o.rejected, o.err = true, err },
			accept:   func() { o.accepted = true },
			complete: func(v any, err error) { o.err = err; o.res, _ = v.(Result) },
		}, r)
	}
	var valid, again, bad outcome
	env.RegisterDelayedCallback(func() { send("k1", req("u1"), &valid) }, time.Second)
	env.RegisterDelayedCallback(func() { send("k2", req("u1"), &again) }, 2*time.Second)
	env.RegisterDelayedCallback(func() { send("k3", Request{Type: "agent"}, &bad) }, 3*time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Hour)
	env.ExecuteWorkflow(WorkflowName, owner)
	if !valid.accepted || valid.err != nil || valid.res.Duplicate {
		t.Fatalf("valid update: %+v", valid)
	}
	if !again.accepted || again.err != nil || !again.res.Duplicate {
		t.Fatalf("repeated request: %+v, want a duplicate", again)
	}
	var app *temporal.ApplicationError
	if !bad.rejected || bad.accepted || !errors.As(bad.err, &app) || app.Type() != ErrTypeInvalidRequest {
		t.Fatalf("invalid update: %+v, want rejected before acceptance as %s", bad, ErrTypeInvalidRequest)
	}
}

type testUpdate struct {
	reject   func(error)
	accept   func()
	complete func(any, error)
}

func (u *testUpdate) Reject(err error)          { u.reject(err) }
func (u *testUpdate) Accept()                   { u.accept() }
func (u *testUpdate) Complete(v any, err error) { u.complete(v, err) }

func TestProducerConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   ProducerConfig
		field string
	}{
		{ProducerConfig{}, ""},
		{ProducerConfig{RetryMin: time.Second}, ""},
		{ProducerConfig{RetryMin: -1}, "RetryMin"},
		{ProducerConfig{RetryMax: -1}, "RetryMax"},
		{ProducerConfig{RetryMin: time.Second, RetryMax: time.Millisecond}, "RetryMax"},
		{ProducerConfig{MaxInFlight: -1}, "MaxInFlight"},
		{ProducerConfig{MaxInFlight: MaxProducerMaxInFlight + 1}, "MaxInFlight"},
		{ProducerConfig{MaxInFlight: 1, AttemptTimeout: MinProducerAttemptTimeout}, ""},
		{ProducerConfig{AttemptTimeout: time.Millisecond}, "AttemptTimeout"},
	} {
		err := tc.cfg.Validate()
		if (tc.field == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.field)) {
			t.Errorf("Validate(%+v) = %v, want an error naming %q", tc.cfg, err, tc.field)
		}
	}
	if _, err := NewProducer(nil, ProducerConfig{}); err == nil {
		t.Error("NewProducer(nil) accepted")
	}
}

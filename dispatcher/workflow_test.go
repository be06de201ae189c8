package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/baton-run/baton/takeover"
)

// memLedger is an in-memory Ledger for the workflow's own logic; the etcd ledger is tested against
// real etcd in the integration module.
type memLedger struct {
	mu      sync.Mutex
	records map[string]string
}

func (l *memLedger) Begin(_ context.Context, key string, _ takeover.Owner) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.records == nil {
		l.records = map[string]string{}
	}
	if l.records[key] == "done" {
		return true, nil
	}
	l.records[key] = "pending"
	return false, nil
}

func (l *memLedger) Complete(_ context.Context, key string, _ takeover.Owner) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records[key] = "done"
	return nil
}

type countingHandler struct {
	mu    sync.Mutex
	calls map[string]int
}

func (h *countingHandler) handle(_ context.Context, key string, _ Request, _ takeover.Owner) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.calls == nil {
		h.calls = map[string]int{}
	}
	h.calls[key]++
	return nil
}

// seen returns a copy of the calls so far, under the lock: a handler started before the run saw its
// cancel can still be running when the test reads (the test environment does not wait for it).
func (h *countingHandler) seen() map[string]int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.calls)
}

func req(task string) Request {
	return Request{Type: "agent", TaskID: task, PayloadSHA256: strings.Repeat("ab", 32), Parent: "session-1"}
}

var owner = takeover.Owner{Project: "billing", Queue: "orders", ServerID: "node-a", Token: 7,
	ElectionKey: "/baton/election/billing/orders/694d9a1b2c3d4e5f"}

func newEnv(t *testing.T, ledger Ledger, h *countingHandler) *testsuite.TestWorkflowEnvironment {
	env := newSuiteEnv()
	Register(env, &Activities{Ledger: ledger, Handler: h.handle, History: firstRun{}})
	return env
}

func newSuiteEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	return s.NewTestWorkflowEnvironment()
}

func TestDuplicateDispatchIsProcessedOnce(t *testing.T) {
	ledger, h := &memLedger{}, &countingHandler{}
	env := newEnv(t, ledger, h)
	for i, r := range []Request{req("t1"), req("t1"), req("t2"), {Type: "agent"}} {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, r) }, time.Duration(i+1)*time.Second)
	}
	var state State
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryState)
		if err != nil {
			t.Error(err)
			return
		}
		if err := v.Get(&state); err != nil {
			t.Error(err)
		}
		env.CancelWorkflow()
	}, 10*time.Second)
	env.ExecuteWorkflow(WorkflowName, Input{Owner: owner})
	if state.Dispatched != 2 || state.Duplicates != 1 || state.Rejected != 1 {
		t.Fatalf("state = %+v, want 2 dispatched, 1 duplicate, 1 rejected", state)
	}
	if h.seen()[req("t1").Key()] != 1 || h.seen()[req("t2").Key()] != 1 {
		t.Fatalf("handler calls = %v, want each key once", h.seen())
	}
	if state.Owner != owner {
		t.Fatalf("state owner = %+v", state.Owner)
	}
}

// A request the ledger already completed (under an earlier, terminated run) is not dispatched again.
func TestLedgerDedupesAcrossRuns(t *testing.T) {
	ledger, h := &memLedger{}, &countingHandler{}
	_, _ = ledger.Begin(context.Background(), req("t1").Key(), owner)
	_ = ledger.Complete(context.Background(), req("t1").Key(), owner)
	env := newEnv(t, ledger, h)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, req("t1")) }, time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, 5*time.Second)
	env.ExecuteWorkflow(WorkflowName, Input{Owner: owner})
	if len(h.seen()) != 0 {
		t.Fatalf("handler called for a completed key: %v", h.seen())
	}
}

func TestContinueAsNewCarriesState(t *testing.T) {
	ledger, h := &memLedger{}, &countingHandler{}
	env := newEnv(t, ledger, h)
	const n = 12
	for i := range n {
		env.RegisterDelayedCallback(func() {
			env.SignalWorkflow(SignalDispatch, req("t"+strings.Repeat("x", i)))
		}, time.Duration(i+1)*time.Second)
	}
	// The history passes the limit after the sixth signal; the run continues as new then, with
	// nothing in flight, without waiting for another signal.
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(41) }, 6500*time.Millisecond)
	env.ExecuteWorkflow(WorkflowName, Input{Owner: owner, HistoryLimit: 40, RecentKeys: 5})
	err := env.GetWorkflowError()
	var can *workflow.ContinueAsNewError
	if !errors.As(err, &can) {
		t.Fatalf("workflow ended with %v, want continue-as-new", err)
	}
	var next Input
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.Carry == nil || next.Carry.Dispatched != 6 || len(next.Carry.Pending) != 0 || next.Carry.Generation != 0 || next.Owner != owner {
		t.Fatalf("carried input = %+v", next)
	}
	if len(next.Carry.Recent) > 5 {
		t.Fatalf("recent keys not bounded: %d", len(next.Carry.Recent))
	}
	if next.HistoryLimit != 40 {
		t.Fatalf("tuning not carried: %+v", next)
	}
	if int(next.Carry.Dispatched) != len(h.seen()) {
		t.Fatalf("carried %d dispatched, handler saw %d keys", next.Carry.Dispatched, len(h.seen()))
	}
}

// An operator's cancel ends the run as Canceled, also while it waits for signals, and the requests
// it accepted but did not see through are listed in its State.
func TestCancelEndsTheRun(t *testing.T) {
	ledger, h := &memLedger{}, &countingHandler{}
	env := newEnv(t, ledger, h)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, req("t1")) }, time.Second)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(SignalDispatch, req("t2"))
		env.SignalWorkflow(SignalDispatch, req("t3"))
		env.CancelWorkflow()
	}, 2*time.Second)
	env.ExecuteWorkflow(WorkflowName, Input{Owner: owner})
	if !env.IsWorkflowCompleted() {
		t.Fatal("the cancelled run is still open")
	}
	var canceled *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Fatalf("run ended with %v, want Canceled", err)
	}
	v, err := env.QueryWorkflow(QueryState)
	if err != nil {
		t.Fatal(err)
	}
	var state State
	if err := v.Get(&state); err != nil {
		t.Fatal(err)
	}
	var unhandled []string
	for _, r := range state.Unhandled {
		unhandled = append(unhandled, r.TaskID)
	}
	slices.Sort(unhandled)
	if state.Dispatched != 1 || !slices.Equal(unhandled, []string{"t2", "t3"}) {
		t.Fatalf("state = %+v, want t1 dispatched and t2, t3 unhandled", state)
	}
	// t2 and t3 arrive with the cancel: the run may have handed them to a handler before it saw the
	// cancel (an activity task can start before its cancellation lands, on the test server as on a
	// real one, and under load it does), but it never counts them as done: they are in Unhandled for
	// the next run. t1 was handled once, and nothing else was handled at all.
	calls := h.seen()
	if calls[req("t1").Key()] != 1 {
		t.Fatalf("handler calls = %v, want t1 once", calls)
	}
	for key := range calls {
		if key != req("t1").Key() && key != req("t2").Key() && key != req("t3").Key() {
			t.Fatalf("handler called for %s, which the run never accepted: %v", key, calls)
		}
	}
}

// A cancel that arrives with nothing else ends the run without waiting for a signal.
func TestCancelWhileIdle(t *testing.T) {
	env := newEnv(t, &memLedger{}, &countingHandler{})
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Second)
	env.ExecuteWorkflow(WorkflowName, Input{Owner: owner})
	var canceled *temporal.CanceledError
	if err := env.GetWorkflowError(); !env.IsWorkflowCompleted() || !errors.As(err, &canceled) {
		t.Fatalf("completed %v with %v, want Canceled", env.IsWorkflowCompleted(), err)
	}
}

// Registration options tune runs started with the bare Owner (as takeovers start them); the run
// continues as new under the same Owner, election key included, leaving the tuning to the options.
func TestRegisterOptionsForceContinueAsNew(t *testing.T) {
	ledger, h := &memLedger{}, &countingHandler{}
	env := newSuiteEnv()
	if err := RegisterWithOptions(env, &Activities{Ledger: ledger, Handler: h.handle, History: firstRun{}}, RegisterOptions{HistoryLimit: 40, RecentKeys: 2}); err != nil {
		t.Fatal(err)
	}
	for i, task := range []string{"t1", "t2", "t3", "t4"} {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, req(task)) }, time.Duration(i+1)*time.Second)
	}
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(41) }, 2500*time.Millisecond)
	env.ExecuteWorkflow(WorkflowName, owner)
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("workflow ended with %v, want continue-as-new", err)
	}
	var next Input
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.Owner != owner || next.Carry == nil || next.Carry.Owner != owner {
		t.Fatalf("the next run's owner = %+v (carried %+v), want %+v", next.Owner, next.Carry, owner)
	}
	if next.Carry.Dispatched != 2 || len(next.Carry.Recent) != 2 {
		t.Fatalf("carried %+v, want 2 dispatched and the 2 most recent keys", next.Carry)
	}
	if next.HistoryLimit != 0 || next.RecentKeys != 0 {
		t.Fatalf("the options were baked into the next input: %+v", next)
	}
}

// Without options the same history does not continue as new.
func TestDefaultTuningKeepsRunning(t *testing.T) {
	env := newEnv(t, &memLedger{}, &countingHandler{})
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(41) }, 500*time.Millisecond)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, req("t1")) }, time.Second)
	env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Second)
	env.ExecuteWorkflow(WorkflowName, owner)
	var canceled *temporal.CanceledError
	if err := env.GetWorkflowError(); !errors.As(err, &canceled) {
		t.Fatalf("run ended with %v, want it running until cancelled", err)
	}
}

func TestRegisterOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  RegisterOptions
		field string
	}{
		{"zero is the defaults", RegisterOptions{}, ""},
		{"small limit for tests", RegisterOptions{HistoryLimit: 1, RecentKeys: 1}, ""},
		{"negative limit", RegisterOptions{HistoryLimit: -1}, "HistoryLimit"},
		{"negative recent keys", RegisterOptions{RecentKeys: -5}, "RecentKeys"},
		{"too many recent keys", RegisterOptions{RecentKeys: MaxRecentKeys + 1}, "RecentKeys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.field)
			}
			env := newSuiteEnv()
			if err := RegisterWithOptions(env, &Activities{}, tc.opts); err == nil {
				t.Fatal("RegisterWithOptions accepted invalid options")
			}
		})
	}
	if err := RegisterWithOptions(newSuiteEnv(), nil, RegisterOptions{}); err == nil || !strings.Contains(err.Error(), "Activities") {
		t.Fatalf("RegisterWithOptions(nil activities) = %v", err)
	}
}

func TestRequestKeyAndValidate(t *testing.T) {
	r := req("t1")
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if r.Key() != req("t1").Key() || r.Key() == req("t2").Key() {
		t.Fatal("key must be deterministic and differ across requests")
	}
	upper := r
	upper.PayloadSHA256 = strings.ToUpper(r.PayloadSHA256)
	if upper.Key() != r.Key() {
		t.Fatal("the payload digest's case must not change the key")
	}
	// Fields are joined with NUL, so moving text between fields changes the key.
	a := Request{Type: "ab", TaskID: "c", PayloadSHA256: r.PayloadSHA256}
	b := Request{Type: "a", TaskID: "bc", PayloadSHA256: r.PayloadSHA256}
	if a.Key() == b.Key() {
		t.Fatal("field boundaries must be part of the key")
	}
	for _, tc := range []struct {
		r     Request
		field string
	}{
		{Request{TaskID: "t", PayloadSHA256: r.PayloadSHA256}, "type"},
		{Request{Type: "a", PayloadSHA256: r.PayloadSHA256}, "task_id"},
		{Request{Type: "a", TaskID: "t", PayloadSHA256: "xyz"}, "payload_sha256"},
		{Request{Type: "a\x00", TaskID: "t", PayloadSHA256: r.PayloadSHA256}, "type"},
		{Request{Type: "a", TaskID: strings.Repeat("t", 600), PayloadSHA256: r.PayloadSHA256}, "task_id"},
	} {
		err := tc.r.Validate()
		if !errors.Is(err, ErrInvalidRequest) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.r, err, tc.field)
		}
	}
}

// firstRun is the history reader of a workflow ID that has no run but the one under test: a
// takeover's scan finds nothing to carry over.
type firstRun struct{}

func (firstRun) GetWorkflowHistory(context.Context, string, string, bool, enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	panic("firstRun: no earlier run to read")
}

func (firstRun) DescribeWorkflowExecution(_ context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: workflowID, RunId: runID},
		StartTime: timestamppb.Now(), Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING}}, nil
}

func (firstRun) ListWorkflow(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return &workflowservice.ListWorkflowExecutionsResponse{}, nil
}

// QueryProgress says what the run holds and since when: a request whose handler has not returned
// stays in flight, counted, with the time it was accepted, after another one was handled.
func TestProgressQuery(t *testing.T) {
	stuck := req("stuck")
	env := newSuiteEnv()
	h := &countingHandler{}
	release := make(chan struct{})
	Register(env, &Activities{Ledger: &memLedger{}, History: firstRun{},
		Handler: func(ctx context.Context, key string, r Request, o takeover.Owner) error {
			if key == stuck.Key() {
				<-release
			}
			return h.handle(ctx, key, r, o)
		}})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, req("t1")) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(SignalDispatch, stuck) }, 2*time.Second)
	var p Progress
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(QueryProgress)
		if err == nil {
			err = v.Get(&p)
		}
		if err != nil {
			t.Error(err)
		}
		close(release)
		env.CancelWorkflow()
	}, 3*time.Second)
	env.ExecuteWorkflow(WorkflowName, Input{Owner: owner})
	if p.Waiting+p.InFlight != 1 || p.Dispatched != 1 || p.LastHandled.IsZero() || p.OldestAccepted.IsZero() ||
		p.OldestAccepted.Before(p.LastHandled) {
		t.Fatalf("progress = %+v, want the stuck request held, accepted after the handled one", p)
	}
}

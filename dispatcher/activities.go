package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// ActivityDispatch is the registered name of Activities.Dispatch.
const ActivityDispatch = "baton.Dispatch"

// Task is the Dispatch activity's input.
type Task struct {
	Key     string         `json:"key"`
	Request Request        `json:"request"`
	Owner   takeover.Owner `json:"owner"`
}

// Result is the Dispatch activity's output.
type Result struct {
	// Duplicate is true when the ledger already had the key completed: nothing was dispatched.
	Duplicate bool `json:"duplicate"`
}

// Ledger records dispatch keys where every owner can read them, so deduplication survives the
// termination of the run that first saw a request. Its writes are fenced: once owner is superseded
// they write nothing and return an error wrapping ledger.ErrSuperseded. ledger.Etcd is the one
// Baton ships (a HoldingLedger).
type Ledger interface {
	// Begin marks key as in progress for owner unless it was completed before; done reports the
	// latter. An older owner's in-progress mark is taken over; a newer owner's is ledger.ErrSuperseded.
	Begin(ctx context.Context, key string, owner takeover.Owner) (done bool, err error)
	// Complete marks key as dispatched.
	Complete(ctx context.Context, key string, owner takeover.Owner) error
}

// HoldingLedger is a Ledger that also holds a key for the attempt that began it, until the attempt
// ends, so that no other attempt (a successor's after a planned move whose quiesce ran out, or a retry
// of the same activity) begins the key while a handler for it still runs: a handler never runs
// concurrently with itself. The Dispatch activity uses it when its Ledger has it.
type HoldingLedger interface {
	Ledger
	// BeginHolding is Begin that, when the key is not done, also claims it for this attempt; release
	// gives the claim up, and must be called once the handler and Complete are over (it is a no-op
	// when the key was done or err is set). A claim whose process dies lapses on its own.
	BeginHolding(ctx context.Context, key string, owner takeover.Owner) (done bool, release func(), err error)
}

var _ HoldingLedger = (*ledger.Etcd)(nil)

// Handler performs one dispatch. It may be called again for the same request if a previous attempt
// failed after it started, or its run was terminated before Complete (at-least-once between Begin and
// Complete), so it must be idempotent by key; with a HoldingLedger (ledger.Etcd) the next call begins
// only once the previous one has returned, never beside it. A handler that fences its own side
// effects (ledger.ConfirmOwner, ledger.OwnerCmps) returns an error wrapping ledger.ErrSuperseded when
// they are refused; the activity then fails without retrying.
type Handler func(ctx context.Context, key string, req Request, owner takeover.Owner) error

// Activities holds the dispatcher's activities and their dependencies.
type Activities struct {
	Ledger  Ledger
	Handler Handler
	// History reads the runs a new run carries over (Backlog); the worker's Temporal client. Without
	// it, a run that took over from another cannot collect what that run accepted: its Backlog
	// activity fails, and is retried until a worker that has a History picks it up.
	History HistoryReader
	// RunLog reads the run log the takeovers write (takeover.RunLog), which a new run's carry-over
	// reads to find every earlier run that may have accepted requests. Default: with a ledger.Etcd,
	// its etcd client (the log's range comes with each run's Owner.RunLog). Without either, a run whose
	// takeover kept a log cannot collect what earlier runs accepted: its Backlog activity fails, and
	// is retried until a worker that has one picks it up.
	RunLog RunLogReader
	// DataConverter decodes the payloads of those histories. Default: the SDK's default data
	// converter; set it to the client's when the application encodes payloads.
	DataConverter converter.DataConverter
	// Events receives event.HandlerRan each time Handler is called (for example the Node's
	// Config().Events). Optional.
	Events event.Sink
	// MeterProvider receives MetricHandlerRuns and MetricCarriedOver. Default: none.
	MeterProvider metric.MeterProvider
	// Clock dates the events. Default: the real clock.
	Clock clock.Clock

	metrics lazyMetrics
	// runLogDenied is set once etcd refused to read the run log for want of permission.
	runLogDenied atomic.Bool

	mu    sync.Mutex
	cache []cachedRun // the last runs Backlog read, oldest first
}

// Dispatch dispatches a request once per dispatch key, only while task.Owner's term holds: the
// ledger's Begin is the fence, so a superseded owner calls no handler and writes nothing.
func (a *Activities) Dispatch(ctx context.Context, task Task) (Result, error) {
	if err := task.Request.Validate(); err != nil {
		return Result{}, classify(err)
	}
	if task.Key != task.Request.Key() {
		return Result{}, classify(fmt.Errorf("%w: key %s does not match the request's fields", ErrInvalidRequest, task.Key))
	}
	if a.Ledger == nil || a.Handler == nil {
		return Result{}, errors.New("dispatcher: Activities needs a Ledger and a Handler")
	}
	done, release, err := a.begin(ctx, task.Key, task.Owner)
	if err != nil {
		return Result{}, classify(fmt.Errorf("dispatcher: ledger begin %s: %w", task.Key, err))
	}
	if done {
		return Result{Duplicate: true}, nil
	}
	// The claim outlives ctx on purpose: a handler that ignores its cancelled context still runs, and
	// no other attempt may begin the key until it has returned.
	defer release()
	err = a.Handler(ctx, task.Key, task.Request, task.Owner)
	a.Events.Emit(event.Event{Kind: event.HandlerRan, At: a.clk().Now(), Project: task.Owner.Project, Queue: task.Owner.Queue,
		Peer: task.Owner.ServerID, Token: task.Owner.Token, DispatchKey: task.Key, Err: event.ErrText(err)})
	if err != nil {
		err = classify(fmt.Errorf("dispatcher: handle %s: %w", task.Key, err))
	}
	a.metrics.get(a.MeterProvider).handlerRun(ctx, task.Owner.Project, task.Owner.Queue, err)
	if err != nil {
		return Result{}, err
	}
	if err := a.Ledger.Complete(ctx, task.Key, task.Owner); err != nil {
		return Result{}, classify(fmt.Errorf("dispatcher: ledger complete %s: %w", task.Key, err))
	}
	return Result{}, nil
}

// begin begins key for owner, holding it for this attempt when the Ledger can (HoldingLedger).
func (a *Activities) begin(ctx context.Context, key string, owner takeover.Owner) (done bool, release func(), err error) {
	if hl, ok := a.Ledger.(HoldingLedger); ok {
		return hl.BeginHolding(ctx, key, owner)
	}
	done, err = a.Ledger.Begin(ctx, key, owner)
	return done, func() {}, err
}

// classify makes err a non-retryable application error of its documented type when retrying cannot
// fix it, and leaves it retryable otherwise (etcd unreachable, a handler's transient failure).
func classify(err error) error {
	var typ string
	switch {
	case errors.Is(err, ledger.ErrSuperseded):
		typ = ErrTypeSuperseded
	case errors.Is(err, ledger.ErrInvalidOwner):
		typ = ErrTypeInvalidOwner
	case errors.Is(err, ErrInvalidRequest):
		typ = ErrTypeInvalidRequest
	case errors.Is(err, ledger.ErrBadRecord):
		typ = ErrTypeBadRecord
	default:
		return err
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), typ, err)
}

// ActivityDispatchBatch is the registered name of Activities.DispatchBatch.
const ActivityDispatchBatch = "baton.DispatchBatch"

// Batch is the DispatchBatch activity's input: requests of one owner, each with its key.
type Batch struct {
	Owner takeover.Owner `json:"owner"`
	Items []BatchItem    `json:"items"`
}

// BatchItem is one request of a Batch.
type BatchItem struct {
	Key     string  `json:"key"`
	Request Request `json:"request"`
}

// BatchResult is the DispatchBatch activity's output, one ItemResult per item, in order.
type BatchResult struct {
	Results []ItemResult `json:"results"`
}

// ItemResult is one item's outcome: its Result, or the type and message of a failure that concerns
// that key alone (ErrTypeBadRecord, ErrTypeInvalidRequest).
type ItemResult struct {
	Result
	ErrorType string `json:"error_type,omitempty"`
	Error     string `json:"error,omitempty"`
}

// DispatchBatch dispatches the items concurrently, each as Dispatch does. One Temporal activity for
// several requests is what lets a queue's single workflow keep up with hundreds of requests a
// second: the server's cost is per activity, not per request. A failure that concerns the owner
// (ErrTypeSuperseded, ErrTypeInvalidOwner) fails the whole batch without retrying, as it would fail
// every item; any retryable failure fails the batch for a retry, in which the items already done are
// duplicates and those left pending by this owner are dispatched again.
func (a *Activities) DispatchBatch(ctx context.Context, b Batch) (BatchResult, error) {
	results := make([]ItemResult, len(b.Items))
	errs := make([]error, len(b.Items))
	var wg sync.WaitGroup
	for i, it := range b.Items {
		wg.Go(func() {
			results[i].Result, errs[i] = a.Dispatch(ctx, Task{Key: it.Key, Request: it.Request, Owner: b.Owner})
		})
	}
	wg.Wait()
	var retry error
	for i, err := range errs {
		var app *temporal.ApplicationError
		switch {
		case err == nil:
		case errors.As(err, &app) && (app.Type() == ErrTypeSuperseded || app.Type() == ErrTypeInvalidOwner):
			return BatchResult{}, err
		case errors.As(err, &app) && app.NonRetryable():
			results[i].ErrorType, results[i].Error = app.Type(), err.Error()
		case retry == nil:
			retry = err
		}
	}
	if retry != nil {
		return BatchResult{}, fmt.Errorf("dispatcher: batch of %d: %w", len(b.Items), retry)
	}
	return BatchResult{Results: results}, nil
}

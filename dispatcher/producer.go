package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// Defaults of ProducerConfig.
const (
	DefaultProducerRetryMin = 50 * time.Millisecond
	// DefaultProducerRetryMax is short: how much a Producer asks of a queue's dispatcher is bounded
	// by MaxInFlight, not by the backoff, and the cap is how late a waiting call notices that the
	// run is back (a Temporal restart of 3 s left the held calls' p99 at 2 s past the server's return
	// with a cap of 2 s).
	DefaultProducerRetryMax = 500 * time.Millisecond
	// DefaultProducerMaxInFlight is below the server's limit of updates in flight on one run
	// (history.maxInFlightUpdates, 10 by default), so that a step-down's quiesce update and a second
	// Producer still find room.
	DefaultProducerMaxInFlight = 8
	// DefaultProducerAttemptTimeout bounds one attempt: a healthy dispatch takes milliseconds, and
	// seconds on a loaded machine.
	DefaultProducerAttemptTimeout = 5 * time.Second
)

// Bounds of ProducerConfig.
const (
	MaxProducerMaxInFlight    = 1000
	MinProducerAttemptTimeout = 100 * time.Millisecond
)

// ProducerConfig tunes a Producer. The zero value of every field means its documented default.
type ProducerConfig struct {
	// RetryMin and RetryMax bound the jittered exponential backoff between attempts of one Dispatch.
	// A graceful handover leaves a gap of milliseconds; a crashed owner's run is replaced after its
	// election TTL. Defaults DefaultProducerRetryMin and DefaultProducerRetryMax; RetryMin
	// positive when set, RetryMax at least RetryMin.
	RetryMin, RetryMax time.Duration
	// MaxInFlight is how many attempts this Producer has in flight on one queue's dispatcher at
	// once; further Dispatch calls to that queue wait for a slot (bounded by their ctx). Temporal
	// holds at most history.maxInFlightUpdates (10 by default) updates in flight on a run and
	// refuses the rest (ResourceExhausted). Without this bound, many concurrent callers turn every
	// refusal into a retry: hundreds of calls a second, each taking the run's lock on the server, on
	// which the successor's describe and the step-down's terminate then queue for seconds, and a
	// rolling restart under load stalls the queue for tens of seconds. Default
	// DefaultProducerMaxInFlight; from 1 to MaxProducerMaxInFlight.
	MaxInFlight int
	// AttemptTimeout bounds one attempt: an update that is not answered in that time (the run it
	// reached does not process it: its worker is gone, or the server lost it) is sent again, with the
	// same update ID, so it joins the update if it is still on its way or reaches the current run.
	// Default DefaultProducerAttemptTimeout; at least MinProducerAttemptTimeout.
	AttemptTimeout time.Duration
	// Logger receives one debug line per retried attempt. Default: no logging.
	Logger *zap.Logger
	// MeterProvider receives MetricProducerCalls and MetricProducerLatency. Default: none.
	MeterProvider metric.MeterProvider
	// Clock paces the retries, draws their jitter and measures each call's latency. Default: the
	// real clock.
	Clock clock.Clock
}

// Validate returns an error naming the first field that breaks its rule.
func (c ProducerConfig) Validate() error {
	switch {
	case c.RetryMin < 0:
		return fmt.Errorf("dispatcher: ProducerConfig.RetryMin must not be negative (0 means %v), got %v", DefaultProducerRetryMin, c.RetryMin)
	case c.RetryMax < 0:
		return fmt.Errorf("dispatcher: ProducerConfig.RetryMax must not be negative (0 means %v), got %v", DefaultProducerRetryMax, c.RetryMax)
	case c.MaxInFlight < 0 || c.MaxInFlight > MaxProducerMaxInFlight:
		return fmt.Errorf("dispatcher: ProducerConfig.MaxInFlight must be from 1 to %d (0 means %d), got %d", MaxProducerMaxInFlight, DefaultProducerMaxInFlight, c.MaxInFlight)
	case c.AttemptTimeout != 0 && c.AttemptTimeout < MinProducerAttemptTimeout:
		return fmt.Errorf("dispatcher: ProducerConfig.AttemptTimeout must be at least %v (0 means %v), got %v", MinProducerAttemptTimeout, DefaultProducerAttemptTimeout, c.AttemptTimeout)
	}
	d := c.withDefaults()
	if d.RetryMax < d.RetryMin {
		return fmt.Errorf("dispatcher: ProducerConfig.RetryMax (%v) must be at least RetryMin (%v)", d.RetryMax, d.RetryMin)
	}
	return nil
}

func (c ProducerConfig) withDefaults() ProducerConfig {
	if c.RetryMin == 0 {
		c.RetryMin = DefaultProducerRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(DefaultProducerRetryMax, c.RetryMin)
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultProducerMaxInFlight
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = DefaultProducerAttemptTimeout
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Producer sends dispatch requests to a queue's dispatcher and tells its caller when each one is
// safe: handled, exactly once in effect. It is safe for concurrent use.
type Producer struct {
	client  client.Client
	cfg     ProducerConfig
	metrics *dispatchMetrics
	slots   *slots
}

// NewProducer returns a Producer over a Temporal client (of the dispatchers' namespace).
func NewProducer(c client.Client, cfg ProducerConfig) (*Producer, error) {
	if c == nil {
		return nil, errors.New("dispatcher: NewProducer: client must not be nil")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newDispatchMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("dispatcher: producer metrics: %w", err)
	}
	cfg = cfg.withDefaults()
	return &Producer{client: c, cfg: cfg, metrics: m, slots: newSlots(cfg.MaxInFlight)}, nil
}

// Dispatch sends req to the dispatcher of (project, queue) and returns once it is recorded handled
// (Result.Duplicate when it had been handled before, by this run or an earlier one). It sends a
// workflow Update named UpdateDispatch to the workflow ID takeover.WorkflowID(project, queue) with no
// run ID, so it reaches whichever run is current, with the dispatch key as the update ID, so sending
// the same request again (also concurrently) joins the same update instead of starting another.
//
// Across a handover it retries with jittered backoff until ctx ends: while no run is open
// (NotFound), when the run closed with the update admitted or accepted (the server aborts it), when
// the run continues as new, when too many updates are in flight, and when the run's owner was
// superseded. What it returns:
//
//   - an error wrapping ErrInvalidRequest (at once, nothing sent) for a request Validate rejects,
//     and for one the dispatcher's validator rejects;
//   - an error wrapping takeover.ErrInvalidName for an invalid project or queue;
//   - an error wrapping ledger.ErrBadRecord when the ledger cannot tell whether the key was dispatched;
//   - an error wrapping ErrPermanent when Temporal refuses the call for a reason retrying cannot fix
//     (invalid argument, namespace not found, permission denied);
//   - ctx's error (errors.Is(err, context.DeadlineExceeded) or context.Canceled) when ctx ends
//     first; the message names the last attempt's error. The request may still be handled later:
//     the run accepted it, or will carry it over.
func (p *Producer) Dispatch(ctx context.Context, project, queue string, req Request) (Result, error) {
	began := p.cfg.Clock.Now()
	res, err := p.dispatch(ctx, project, queue, req)
	p.metrics.call(ctx, project, queue, outcome(res, err), p.cfg.Clock.Now().Sub(began))
	return res, err
}

// outcome is a Dispatch call's MetricProducerCalls outcome.
func outcome(res Result, err error) string {
	switch {
	case err == nil && res.Duplicate:
		return OutcomeDuplicate
	case err == nil:
		return OutcomeHandled
	case errors.Is(err, ErrInvalidRequest):
		return OutcomeRejected
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return OutcomeTimedOut
	}
	return OutcomeFailed
}

func (p *Producer) dispatch(ctx context.Context, project, queue string, req Request) (Result, error) {
	if err := req.Validate(); err != nil {
		return Result{}, err
	}
	id, err := takeover.WorkflowID(project, queue)
	if err != nil {
		return Result{}, err
	}
	key := req.Key()
	log := p.cfg.Logger.With(zap.String("workflow_id", id), zap.String("key", key))
	backoff := p.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		res, err := p.once(ctx, id, key, req)
		if err == nil {
			return res, nil
		}
		if err := permanent(err); err != nil {
			return Result{}, fmt.Errorf("dispatcher: dispatch %s to %s: %w", key, id, err)
		}
		if ctx.Err() != nil {
			return Result{}, fmt.Errorf("dispatcher: dispatch %s to %s: %w (after %d attempt(s); last: %v)", key, id, ctx.Err(), attempt, err)
		}
		log.Debug("dispatch not yet handled; retrying", zap.Int("attempt", attempt), zap.Error(err))
		if !clock.Sleep(ctx, p.cfg.Clock, clock.Jitter(p.cfg.Clock, backoff)) {
			return Result{}, fmt.Errorf("dispatcher: dispatch %s to %s: %w (after %d attempt(s); last: %v)", key, id, ctx.Err(), attempt, err)
		}
		backoff = min(2*backoff, p.cfg.RetryMax)
	}
}

// once is one attempt: it waits for one of the queue's MaxInFlight slots, then sends the update and
// waits for its outcome, at most AttemptTimeout.
func (p *Producer) once(ctx context.Context, id, key string, req Request) (Result, error) {
	release, err := p.slots.acquire(ctx, id)
	if err != nil {
		return Result{}, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.AttemptTimeout)
	defer cancel()
	h, err := p.client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   id,
		UpdateID:     key,
		UpdateName:   UpdateDispatch,
		Args:         []any{req},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err != nil {
		return Result{}, err
	}
	var res Result
	if err := h.Get(ctx, &res); err != nil {
		return Result{}, err
	}
	return res, nil
}

// permanent returns the error Dispatch ends with for err, or nil when the next attempt may succeed.
//
// What Temporal (1.32) answers across a handover, all retried: NotFound "workflow execution already
// completed" or "not found" while no run is open; NotFound "workflow update was aborted by closing
// workflow" for an update the closing run had admitted but not accepted; an update failure of type
// AcceptedUpdateCompletedWorkflow for one it had accepted (the next run carries it over and the
// retry joins it); ResourceExhausted when the run continues as new with the update admitted, or
// holds its maximum of in-flight updates (history.maxInFlightUpdates, default 10);
// FailedPrecondition once a run received history.maxTotalUpdates (the workflow continues as new
// before that); and the dispatcher's own ErrTypeContinuing, ErrTypeSuperseded, ErrTypeInvalidOwner
// and ErrTypeDispatchFailed failures.
func permanent(err error) error {
	var (
		app        *temporal.ApplicationError
		invalid    *serviceerror.InvalidArgument
		nsNotFound *serviceerror.NamespaceNotFound
		denied     *serviceerror.PermissionDenied
	)
	switch {
	case errors.As(err, &app) && app.Type() == ErrTypeInvalidRequest:
		return fmt.Errorf("%w: %v", ErrInvalidRequest, err)
	case errors.As(err, &app) && app.Type() == ErrTypeBadRecord:
		return fmt.Errorf("%w: %v", ledger.ErrBadRecord, err)
	case errors.As(err, &invalid), errors.As(err, &nsNotFound), errors.As(err, &denied):
		return fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	return nil
}

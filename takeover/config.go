package takeover

import (
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/event"
)

// StartMode says how the dispatcher run is started.
type StartMode int

const (
	// StartExecute starts the run with ExecuteWorkflow.
	StartExecute StartMode = iota
	// StartSignalWithStart starts it with SignalWithStartWorkflow, delivering SignalName with the owner
	// as the run's first signal.
	StartSignalWithStart
)

// StepDownPolicy says what a gracefully stepping-down owner does with its own run.
type StepDownPolicy int

const (
	// TerminateOwnRun terminates the owner's own run, by its run ID, while the term still holds. No
	// dispatcher acts without a live term, at the cost of a gap (milliseconds on a graceful handover)
	// until the successor's run starts. The default.
	TerminateOwnRun StepDownPolicy = iota
	// LeaveRunning leaves the run to the successor, whose takeover terminates it. The dispatcher keeps
	// serving through the handover, but the old run acts for a moment without a live term, so
	// everything it does must be fenced by its token.
	LeaveRunning
)

// DefaultWorkflowType is the registered name of the reference dispatcher workflow.
const DefaultWorkflowType = "baton.Dispatcher"

// Config tunes a Manager. The zero value of every field means its documented default.
type Config struct {
	// WorkflowType is the registered name of the dispatcher workflow. Default "baton.Dispatcher".
	WorkflowType string
	// TaskQueue is the Temporal task queue the dispatcher workflow runs on, for every queue. Default:
	// DefaultTaskQueue(project, queue), one task queue per queue scoped by the project, so projects
	// that share a namespace and a queue name never run each other's dispatcher tasks. A Start hook
	// may choose per queue (Start.Options.TaskQueue).
	TaskQueue string
	// Start shapes each run's start: its input, task queue, timeouts, search attributes, memo fields
	// of the application's own. Baton keeps the workflow ID, the ID policies and the owner memo, and
	// refuses a hook that changes them (ErrInvalidStart). Optional.
	Start StartHook
	// Mode is StartExecute (default) or StartSignalWithStart.
	Mode StartMode
	// SignalName is the signal sent with StartSignalWithStart. Default "baton.takeover".
	SignalName string
	// StepDown is what StepDown does with the owner's own run. Default TerminateOwnRun.
	StepDown StepDownPolicy
	// Legacy starts runs without a WorkflowIDConflictPolicy, for servers before Temporal 1.24 that do
	// not know it (their default fails on a running workflow, as FAIL does). A server that rejects the
	// conflict policy switches a Manager to this mode by itself.
	Legacy bool
	// DataConverter reads and writes the owner memo. It must be the Temporal client's data converter
	// when the application sets one (a codec that encrypts payloads, say): a memo that cannot be read
	// fails the takeover with ErrUnreadableOwner instead of reading every token as 0. Default: the
	// SDK's default data converter.
	DataConverter converter.DataConverter
	// MaxAttempts bounds the start attempts of one takeover. Default 10; at least 1.
	MaxAttempts int
	// MaxConcurrent bounds the takeover attempts (describe, terminate, start) one Manager, a Node's,
	// has in flight at once across its queues; the others wait for a slot, their wait bounded by the
	// term. A worker that inherits a thousand queues at once (its peer stopped) would otherwise send
	// every attempt together: on a loaded server they time out, are retried, and the retries keep it
	// overloaded, so most queues stay without a run for minutes. Default DefaultMaxConcurrent; from 1
	// to MaxMaxConcurrent.
	MaxConcurrent int
	// WatchInterval bounds each long poll of Watch on the run's close; a plain read follows it, so a
	// close is seen within this interval at the latest. Default 10s (a Node uses its heartbeat
	// interval).
	WatchInterval time.Duration
	// AttemptTimeout bounds each Temporal call. Default 5s.
	AttemptTimeout time.Duration
	// WorkflowTaskTimeout is the workflow task timeout (start to close) of the dispatcher runs Baton
	// starts; continue-as-new keeps it (the SDK carries the run's own into the next run). Every
	// worker polls every queue's dispatcher task queue, so any worker, not only the leader, may hold
	// a run's workflow task when it crashes: Temporal gives that task to another worker only once
	// this timeout has passed, and the requests the run accepted meanwhile wait that long. Default
	// DefaultWorkflowTaskTimeout; from MinWorkflowTaskTimeout to MaxWorkflowTaskTimeout. A Start
	// hook sees it in Start.Options.WorkflowTaskTimeout and may change it (an application's own
	// workflow with heavy code in its tasks may need longer); zero there is Temporal's namespace
	// default (10s).
	WorkflowTaskTimeout time.Duration
	// QuiesceTimeout bounds how long a planned step-down (StepDown with TerminateOwnRun) waits for its
	// run to finish the work in flight (UpdateQuiesce) before it ends the run. The wait never eats
	// into the StepDownReserve at the end of the step-down's context, which is the terminate's: a
	// caller that bounds the step-down gives it HandOverBudget (Baton's Node sets the election's
	// HandOverTimeout so). Default DefaultQuiesceTimeout; negative: no wait (the successor runs again
	// what was in flight).
	QuiesceTimeout time.Duration
	// RetryMin and RetryMax bound the jittered exponential backoff between attempts (Temporal refuses
	// to start the same workflow ID again within about 1 s of the previous start). Package ownership
	// backs off with them too, between the replacements of runs that closed behind the owner's back
	// (RetryMin to RetryMax) and between the retries of a held term (RetryMin doubling up to its
	// PermanentHold, at least RetryMax: ownership.Settings). Defaults 100ms and 2s; RetryMax at least
	// RetryMin.
	RetryMin, RetryMax time.Duration
	// RunLog records every run a takeover starts, reuses or terminates before the takeover reports
	// or ends it, and each run's Owner.RunLog names where: the successor's carry-over reads it to find
	// every run that may have accepted requests, whatever Temporal's visibility lags. Baton's Node sets
	// an EtcdRunLog (DefaultRunLogPrefix) unless one is given. Optional: without it the carry-over
	// relies on visibility, and a closed run whose close is not indexed yet can be missed.
	RunLog RunLog
	// Logger receives structured events. Default: no-op.
	Logger *zap.Logger
	// Events receives the takeover's events (event.TakenOver, PriorTerminated, SteppedDown). Optional.
	Events event.Sink
	// MeterProvider receives the takeover metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// Clock measures latency and backoff. Default: the real clock.
	Clock clock.Clock
}

// Config.MaxConcurrent's default and bound. 64 matches the hand-overs a stopping peer makes at once
// (election's MaxHandOvers): a whole worker's stop of 1,000 queues, successor's run Running, p95
// 30-33 s at 64 against 40 s at 32 (which timed 56 starts out) and 37 s at 128 (260 timed out);
// of 100 queues, 1.7-2.0 s against 2.5-2.6 s at 32.
const (
	DefaultMaxConcurrent = 64
	MaxMaxConcurrent     = 10000
)

// Config.WorkflowTaskTimeout's default and bounds.
const (
	// DefaultWorkflowTaskTimeout is short enough that a task held by a crashed worker is given to
	// another well within an election TTL plus a second (the queue's crash budget: a run's
	// requests wait no longer for a non-leader's crash than for its leader's), and long enough for
	// a workflow task that replays a run with a full history (dispatcher.DefaultHistoryLimit
	// events, or Temporal's suggestion to continue as new at about 4,100) on a loaded 2-core
	// machine: reading and replaying a full reference dispatcher run took about 0.3 s there with
	// both cores busy, well under a seventh of this. Temporal's own default is 10s.
	DefaultWorkflowTaskTimeout = 2 * time.Second
	// MinWorkflowTaskTimeout is the shortest accepted: a shorter task timeout risks timing out the
	// replay of a long history again and again, and the run would make no progress.
	MinWorkflowTaskTimeout = time.Second
	// MaxWorkflowTaskTimeout is Temporal's own maximum: the server caps a longer one.
	MaxWorkflowTaskTimeout = 120 * time.Second
)

// DefaultQuiesceTimeout is Config.QuiesceTimeout's default: a dispatch batch's handlers usually take
// milliseconds, and a planned move waits no longer than a few seconds for a slow one.
const DefaultQuiesceTimeout = 5 * time.Second

// StepDownReserve is what a planned step-down keeps, at the end of the time it is given, for the
// steps after the quiesce: ending the run by its run ID and clearing its heartbeat entry, a round trip
// each to Temporal and Redis.
const StepDownReserve = time.Second

// HandOverBudget is the time a graceful step-down under c (defaults applied) needs to use its whole
// quiesce: QuiesceTimeout and then StepDownReserve; StepDownReserve alone where nothing quiesces.
func (c Config) HandOverBudget() time.Duration {
	c = c.WithDefaults()
	if c.QuiesceTimeout < 0 || c.StepDown == LeaveRunning {
		return StepDownReserve
	}
	return c.QuiesceTimeout + StepDownReserve
}

// DefaultConfig is Config{} with every default applied: the one definition of the takeover defaults,
// which the root package and tools read rather than restate.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.WorkflowType == "" {
		c.WorkflowType = DefaultWorkflowType
	}
	if c.SignalName == "" {
		c.SignalName = "baton.takeover"
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.MaxConcurrent == 0 {
		c.MaxConcurrent = DefaultMaxConcurrent
	}
	if c.WatchInterval == 0 {
		c.WatchInterval = 10 * time.Second
	}
	if c.AttemptTimeout == 0 {
		c.AttemptTimeout = 5 * time.Second
	}
	if c.WorkflowTaskTimeout == 0 {
		c.WorkflowTaskTimeout = DefaultWorkflowTaskTimeout
	}
	if c.QuiesceTimeout == 0 {
		c.QuiesceTimeout = DefaultQuiesceTimeout
	}
	if c.RetryMin == 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 2 * time.Second
	}
	if c.DataConverter == nil {
		c.DataConverter = converter.GetDefaultDataConverter()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Validate checks the configuration after defaults are applied and returns an error wrapping
// ErrInvalidConfig that names the field and the rule it breaks.
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	switch {
	case c.Mode != StartExecute && c.Mode != StartSignalWithStart:
		return bad("Mode", "must be StartExecute or StartSignalWithStart, got %d", c.Mode)
	case c.StepDown != TerminateOwnRun && c.StepDown != LeaveRunning:
		return bad("StepDown", "must be TerminateOwnRun or LeaveRunning, got %d", c.StepDown)
	case c.MaxAttempts < 1:
		return bad("MaxAttempts", "must be at least 1, got %d", c.MaxAttempts)
	case c.MaxConcurrent < 1 || c.MaxConcurrent > MaxMaxConcurrent:
		return bad("MaxConcurrent", "must be from 1 to %d (0 means %d), got %d", MaxMaxConcurrent, DefaultMaxConcurrent, c.MaxConcurrent)
	case c.WatchInterval <= 0:
		return bad("WatchInterval", "must be positive, got %v", c.WatchInterval)
	case c.AttemptTimeout <= 0:
		return bad("AttemptTimeout", "must be positive, got %v", c.AttemptTimeout)
	case c.WorkflowTaskTimeout < MinWorkflowTaskTimeout || c.WorkflowTaskTimeout > MaxWorkflowTaskTimeout:
		return bad("WorkflowTaskTimeout", "must be from %v to %v (0 means %v), got %v",
			MinWorkflowTaskTimeout, MaxWorkflowTaskTimeout, DefaultWorkflowTaskTimeout, c.WorkflowTaskTimeout)
	case c.RetryMin <= 0:
		return bad("RetryMin", "must be positive, got %v", c.RetryMin)
	case c.RetryMax < c.RetryMin:
		return bad("RetryMax", "must be at least RetryMin (%v), got %v", c.RetryMin, c.RetryMax)
	}
	return nil
}

package takeover

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
)

// Client is the part of the Temporal client a Manager uses; client.Client satisfies it.
type Client interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	TerminateWorkflow(ctx context.Context, workflowID, runID, reason string, details ...any) error
}

var _ Client = client.Client(nil)

// Term is what a takeover needs of an election term; *election.Term satisfies it.
type Term interface {
	Project() string
	Queue() string
	LeaderID() string
	// Key is the term's candidate key in etcd; it exists at revision Token exactly while the term holds.
	Key() string
	Token() int64
	Started() time.Time
	Context() context.Context
	// Check is the local, synchronous test that the term may act.
	Check() error
	// Confirm asks etcd whether the term still holds.
	Confirm(ctx context.Context) error
}

var _ Term = (*election.Term)(nil)

// Owner identifies who owns a dispatcher run. It is the run's input and its memo (key MemoKey); the
// server ID is never part of the workflow ID.
//
// Token and ElectionKey are the exact-match lease of the run: the term that started it holds exactly
// while ElectionKey exists in etcd with create revision Token. A side effect made conditional on that
// compare in an etcd transaction is refused once the owner is superseded (fencing in the resource).
type Owner struct {
	Project           string    `json:"project"`
	Queue             string    `json:"queue"`
	ServerID          string    `json:"server_id"`
	Token             int64     `json:"token"`
	ElectionKey       string    `json:"election_key,omitempty"`
	TakeoverStartedAt time.Time `json:"takeover_started_at"`
}

// MemoKey is the memo field that carries the Owner of a dispatcher run.
const MemoKey = "baton.owner"

// Path names how a takeover reached its run; it is a metric attribute.
type Path string

// The paths of a takeover.
const (
	PathStart          Path = "start"           // no open run: started directly
	PathTerminateFirst Path = "terminate_first" // a prior run was terminated by run ID, then the new one started
	PathLegacy         Path = "legacy"          // WorkflowExecutionAlreadyStarted answered by terminate and retry
	PathReused         Path = "reused"          // this term's own run was already open
)

// Run is a dispatcher run started (or found) by a takeover.
type Run struct {
	WorkflowID string
	RunID      string
	Owner      Owner
	Path       Path
	// Attempts is how many start attempts the takeover needed.
	Attempts int
	// Latency is from the term's start to the run being open.
	Latency time.Duration
}

// Manager takes over and steps down dispatcher runs for election terms.
type Manager struct {
	client  Client
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	legacy  atomic.Bool
}

// New returns a Manager over a Temporal client.
func New(c Client, cfg Config) (*Manager, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: client must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	m, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("takeover: metrics: %w", err)
	}
	mgr := &Manager{client: c, cfg: cfg, log: cfg.Logger, metrics: m}
	mgr.legacy.Store(cfg.Legacy)
	return mgr, nil
}

// Take makes the term's process the owner of the (project, queue) dispatcher: it terminates the open
// run of any earlier owner by its exact run ID, with a reason naming the new owner and token, and
// starts a new run whose input and memo carry the Owner. Every terminate is preceded by a check that
// the term still holds (local, then in etcd); a superseded term terminates nothing and gets
// ErrSuperseded. The takeover is abandoned the moment the term ends, and gives up after
// MaxAttempts with ErrFailed.
func (m *Manager) Take(ctx context.Context, term Term) (Run, error) {
	id, err := WorkflowID(term.Project(), term.Queue())
	if err != nil {
		m.metrics.takeover(ctx, term.Project(), term.Queue(), "invalid", PathStart)
		return Run{}, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(term.Context(), func() { cancel(fmt.Errorf("%w: term ended", ErrSuperseded)) })
	defer stop()

	owner := Owner{Project: term.Project(), Queue: term.Queue(), ServerID: term.LeaderID(), Token: term.Token(),
		ElectionKey: term.Key(), TakeoverStartedAt: m.cfg.Clock.Now()}
	log := m.log.With(zap.String("project", owner.Project), zap.String("queue", owner.Queue),
		zap.String("server_id", owner.ServerID), zap.Int64("token", owner.Token), zap.String("workflow_id", id))

	path, backoff := PathStart, m.cfg.RetryMin
	var lastErr error
	for attempt := 1; attempt <= m.cfg.MaxAttempts; attempt++ {
		if attempt > 1 {
			if !clock.Sleep(ctx, m.cfg.Clock, clock.Jitter(backoff)) {
				break
			}
			backoff = min(2*backoff, m.cfg.RetryMax)
		}
		run, next, err := m.attempt(ctx, term, id, owner, path, log)
		if err == nil {
			run.Attempts = attempt
			run.Latency = m.cfg.Clock.Now().Sub(term.Started())
			m.metrics.takeover(ctx, owner.Project, owner.Queue, "started", run.Path)
			m.metrics.latency(ctx, owner.Project, owner.Queue, run.Latency, run.Path)
			log.Info("dispatcher taken over", zap.String("run_id", run.RunID), zap.String("path", string(run.Path)),
				zap.Int("attempts", attempt), zap.Duration("latency", run.Latency))
			return run, nil
		}
		path, lastErr = next, err
		if errors.Is(err, ErrSuperseded) || !retryable(err) {
			break
		}
		log.Info("dispatcher takeover attempt failed; retrying", zap.Int("attempt", attempt), zap.Error(err))
	}
	switch {
	case term.Context().Err() != nil && !errors.Is(lastErr, ErrSuperseded):
		lastErr = fmt.Errorf("%w: term ended: %w", ErrSuperseded, context.Cause(term.Context()))
	case ctx.Err() != nil && !errors.Is(lastErr, ErrSuperseded):
		lastErr = context.Cause(ctx)
	}
	if errors.Is(lastErr, ErrSuperseded) {
		m.metrics.takeover(ctx, owner.Project, owner.Queue, "superseded", path)
		log.Warn("dispatcher takeover abandoned: the term no longer holds", zap.Error(lastErr))
		return Run{}, lastErr
	}
	m.metrics.takeover(ctx, owner.Project, owner.Queue, "failed", path)
	log.Error("dispatcher takeover failed", zap.Error(lastErr))
	return Run{}, fmt.Errorf("%w: %s after %d attempts at most: %w", ErrFailed, id, m.cfg.MaxAttempts, lastErr)
}

// attempt makes one pass: describe, terminate a foreign open run, start. It returns the path the next
// attempt continues on.
func (m *Manager) attempt(ctx context.Context, term Term, id string, owner Owner, path Path, log *zap.Logger) (Run, Path, error) {
	legacy := m.legacy.Load()
	// Normally the prior run is terminated first, by run ID and with a reason naming the new owner. In
	// legacy mode the start comes first and WorkflowExecutionAlreadyStarted leads here on the retry.
	if !legacy || path == PathLegacy {
		prior, err := m.describe(ctx, id)
		if err != nil {
			return Run{}, path, err
		}
		if prior.open {
			switch {
			case prior.owner.Token == owner.Token && prior.owner.ServerID == owner.ServerID:
				return Run{WorkflowID: id, RunID: prior.runID, Owner: prior.owner, Path: PathReused}, path, nil
			case prior.owner.Token > owner.Token:
				return Run{}, path, fmt.Errorf("%w: run %s is owned by %s at token %d, newer than ours (%d)",
					ErrSuperseded, prior.runID, prior.owner.ServerID, prior.owner.Token, owner.Token)
			}
			reason := fmt.Sprintf("baton: taken over by %s (token %d)", owner.ServerID, owner.Token)
			if err := m.terminate(ctx, term, id, prior.runID, reason); err != nil {
				return Run{}, path, err
			}
			log.Info("prior dispatcher run terminated", zap.String("prior_run_id", prior.runID),
				zap.String("prior_server_id", prior.owner.ServerID), zap.Int64("prior_token", prior.owner.Token))
			if path == PathStart {
				path = PathTerminateFirst
			}
		}
	}
	if err := m.fence(ctx, term); err != nil {
		return Run{}, path, err
	}
	run, err := m.start(ctx, id, owner, legacy)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case err == nil:
		return Run{WorkflowID: id, RunID: run.GetRunID(), Owner: owner, Path: path}, path, nil
	case errors.As(err, &already):
		return Run{}, PathLegacy, fmt.Errorf("start %s: %w", id, err)
	case !legacy && conflictPolicyRefused(err):
		m.legacy.Store(true)
		log.Warn("Temporal refused WorkflowIDConflictPolicy; using the legacy terminate-and-retry start", zap.Error(err))
		return Run{}, PathLegacy, fmt.Errorf("start %s: %w", id, err)
	}
	return Run{}, path, fmt.Errorf("start %s: %w", id, err)
}

type priorRun struct {
	runID string
	open  bool
	owner Owner
}

func (m *Manager) describe(ctx context.Context, id string) (priorRun, error) {
	actx, cancel := context.WithTimeout(ctx, m.cfg.AttemptTimeout)
	defer cancel()
	resp, err := m.client.DescribeWorkflowExecution(actx, id, "")
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return priorRun{}, nil
	}
	if err != nil {
		return priorRun{}, fmt.Errorf("describe %s: %w", id, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	prior := priorRun{
		runID: info.GetExecution().GetRunId(),
		open:  info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
	}
	if p, ok := info.GetMemo().GetFields()[MemoKey]; ok {
		// A run without a readable owner (a legacy deployment's) counts as token 0: always replaced.
		_ = converter.GetDefaultDataConverter().FromPayload(p, &prior.owner)
	}
	return prior, nil
}

// terminate ends exactly runID after confirming the term; a run that is already gone is fine.
func (m *Manager) terminate(ctx context.Context, term Term, id, runID, reason string) error {
	if runID == "" {
		return fmt.Errorf("takeover: refusing to terminate %s without a run ID", id)
	}
	if err := m.fence(ctx, term); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, m.cfg.AttemptTimeout)
	defer cancel()
	err := m.client.TerminateWorkflow(actx, id, runID, reason)
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		m.metrics.terminated(ctx, term.Project(), term.Queue(), "error")
		return fmt.Errorf("terminate %s run %s: %w", id, runID, err)
	}
	m.metrics.terminated(ctx, term.Project(), term.Queue(), "ok")
	return nil
}

func (m *Manager) fence(ctx context.Context, term Term) error {
	if err := term.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrSuperseded, err)
	}
	actx, cancel := context.WithTimeout(ctx, m.cfg.AttemptTimeout)
	defer cancel()
	if err := term.Confirm(actx); err != nil {
		if errors.Is(err, election.ErrNotLeader) {
			return fmt.Errorf("%w: %w", ErrSuperseded, err)
		}
		return fmt.Errorf("confirm term: %w", err)
	}
	return nil
}

func (m *Manager) start(ctx context.Context, id string, owner Owner, legacy bool) (client.WorkflowRun, error) {
	taskQueue := m.cfg.TaskQueue
	if taskQueue == "" {
		taskQueue = owner.Queue
	}
	opts := client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             taskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		// Any run still open at this point appeared after the prior one was terminated: the server
		// ends it as part of the start.
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     map[string]any{MemoKey: owner},
	}
	if legacy {
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED
	}
	actx, cancel := context.WithTimeout(ctx, m.cfg.AttemptTimeout)
	defer cancel()
	if m.cfg.Mode == StartSignalWithStart {
		return m.client.SignalWithStartWorkflow(actx, id, m.cfg.SignalName, owner, opts, m.cfg.WorkflowType, owner)
	}
	return m.client.ExecuteWorkflow(actx, opts, m.cfg.WorkflowType, owner)
}

// StepDown is called by a gracefully stepping-down owner while its term still holds, before it
// resigns. With TerminateOwnRun it terminates exactly run (by run ID, after confirming the term);
// with LeaveRunning it does nothing. A superseded term terminates nothing and gets ErrSuperseded.
func (m *Manager) StepDown(ctx context.Context, term Term, run Run) error {
	if m.cfg.StepDown == LeaveRunning {
		return nil
	}
	if run.Owner.Token != term.Token() {
		return fmt.Errorf("%w: run %s belongs to token %d, not to this term (%d)", ErrSuperseded, run.RunID, run.Owner.Token, term.Token())
	}
	reason := fmt.Sprintf("baton: %s stepped down (token %d)", term.LeaderID(), term.Token())
	if err := m.terminate(ctx, term, run.WorkflowID, run.RunID, reason); err != nil {
		return err
	}
	m.log.Info("own dispatcher run terminated on step-down", zap.String("workflow_id", run.WorkflowID),
		zap.String("run_id", run.RunID), zap.Int64("token", term.Token()))
	return nil
}

// retryable tells transient failures (server busy, unavailable, a run that appeared in between) from
// permanent ones (invalid arguments, a missing namespace, permission).
func retryable(err error) bool {
	var (
		invalid    *serviceerror.InvalidArgument
		nsNotFound *serviceerror.NamespaceNotFound
		denied     *serviceerror.PermissionDenied
	)
	return !errors.As(err, &invalid) && !errors.As(err, &nsNotFound) && !errors.As(err, &denied)
}

// conflictPolicyRefused recognises a server too old for WorkflowIDConflictPolicy.
func conflictPolicyRefused(err error) bool {
	var unimplemented *serviceerror.Unimplemented
	return errors.As(err, &unimplemented)
}

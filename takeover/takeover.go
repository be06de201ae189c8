package takeover

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
)

// Client is the part of the Temporal client a Manager uses; client.Client satisfies it.
type Client interface {
	ExecuteWorkflow(ctx context.Context, options client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error)
	SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
		options client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error)
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	TerminateWorkflowWithOptions(ctx context.Context, options client.TerminateWorkflowOptions) error
	// UpdateWorkflow asks a stepping-down owner's run to quiesce (UpdateQuiesce).
	UpdateWorkflow(ctx context.Context, options client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error)
	// GetWorkflowHistory long-polls for a run's close event (Watch).
	GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool,
		filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator
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
	// PriorRunID is the workflow's latest run when the takeover started this one (open and then
	// terminated by it, or already closed): the run whose accepted but unfinished work the new run
	// carries over. Empty for the workflow's first run.
	PriorRunID string `json:"prior_run_id,omitempty"`
	// RunLog is the range of the run log (Config.RunLog) where the takeover that started this run
	// logged it and the runs before it: the carry-over reads the runs it must hand over from there.
	// Empty when the takeover kept no log (the carry-over then relies on visibility alone).
	RunLog string `json:"run_log,omitempty"`
}

// MemoKey is the memo field that carries the Owner of a dispatcher run.
const MemoKey = "baton.owner"

// ReasonPrefix starts the reason of every termination Baton makes (a takeover, a step-down, the
// reconciler's cleanup), so that an operator or `baton verify` tells them from any other: a
// conflict policy's, or a hand's.
const ReasonPrefix = "baton: "

// UpdateQuiesce is the workflow Update a gracefully stepping-down owner sends its run before it ends
// it (StepDown): the run starts no more work and completes the update once the work in flight is
// done, so a planned move (stop, drain, rollout, shed) runs nothing twice. The dispatcher package's
// workflows handle it; a run whose workflow does not is ended without waiting.
const UpdateQuiesce = "baton.quiesce"

// Path names how a takeover reached its run; it is a metric attribute.
type Path string

// The paths of a takeover.
const (
	PathStart          Path = "start"           // no open run: started directly
	PathTerminateFirst Path = "terminate_first" // a prior run was terminated by run ID, then the new one started
	PathReused         Path = "reused"          // this term's own run (or its continuation) was already open
)

// Run is a dispatcher run started (or found) by a takeover, and followed by Watch.
type Run struct {
	WorkflowID string
	// RunID is the current run of the chain: the run the takeover started, or the run it continued as.
	RunID string
	// FirstRunID is the run the takeover started: the first run of the chain. Run-scoped actions
	// (StepDown, a reconciler's terminate) name it as the FirstExecutionRunId, so they reach the chain's
	// current run and never a run of another chain.
	FirstRunID string
	Owner      Owner
	Path       Path
	// Attempts is how many start attempts the takeover needed.
	Attempts int
	// Latency is from the term's start to the run being open.
	Latency time.Duration
	// logged is the chain's latest run as the takeover's run log record names it (its Last): a
	// step-down of a chain still at that run has nothing to log again.
	logged string
}

// chainFirst is the first run of run's chain: what run-scoped calls name as FirstExecutionRunId.
func (r Run) chainFirst() string {
	if r.FirstRunID != "" {
		return r.FirstRunID
	}
	return r.RunID
}

// Manager takes over, supervises and steps down dispatcher runs for election terms.
type Manager struct {
	client  Client
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	// legacy is set once the server refused WorkflowIDConflictPolicy (before Temporal 1.24): starts then
	// leave it unset, which such servers treat as FAIL.
	legacy atomic.Bool
	// runLogDenied is set once etcd refused the run log for want of permission: runs are then started
	// without it (Owner.RunLog empty), as before the log existed.
	runLogDenied atomic.Bool
	// slots holds one token per takeover attempt in flight (Config.MaxConcurrent).
	slots chan struct{}

	// quiesceMu guards quiesceUntil: for each term (by token) whose run was asked to quiesce, when
	// its quiesce must be over. A term's calls share one QuiesceTimeout: a process's Node.Quiesce and
	// then its step-down's wait no longer together than one quiesce would.
	quiesceMu    sync.Mutex
	quiesceUntil map[int64]time.Time
}

// New returns a Manager over a Temporal client.
func New(c Client, cfg Config) (*Manager, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: client must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	m, err := newMetrics(cfg.MeterProvider)
	if err != nil {
		return nil, fmt.Errorf("takeover: metrics: %w", err)
	}
	mgr := &Manager{client: c, cfg: cfg, log: cfg.Logger, metrics: m, quiesceUntil: map[int64]time.Time{},
		slots: make(chan struct{}, cfg.MaxConcurrent)}
	mgr.legacy.Store(cfg.Legacy)
	return mgr, nil
}

// Config returns the configuration in force, defaults applied.
func (m *Manager) Config() Config { return m.cfg }

// Take makes the term's process the owner of the (project, queue) dispatcher. Each attempt describes
// the workflow, terminates an open run of an earlier owner by its exact run ID (with a reason naming
// the new owner and token), and starts a new run with the FAIL conflict policy, so a start never ends
// a run it did not name: a run that appeared in between (a successor's, or a superseded leader's late
// start) makes the start fail with AlreadyStarted and the next attempt looks again. Every terminate
// and start is preceded by a check that the term still holds (local, then in etcd), and the term is
// checked once more after the start: a run started by a term that has ended is terminated again by
// its own run ID and reported as ErrSuperseded. The takeover is abandoned the moment the term ends and
// gives up after MaxAttempts with ErrFailed; a failure that retrying cannot fix (namespace not found,
// permission denied, invalid argument, an owner memo it cannot read) also wraps ErrPermanent.
func (m *Manager) Take(ctx context.Context, term Term) (Run, error) {
	return m.take(ctx, term, term.Started())
}

// Replace is Take for a run that closed during the term: the same takeover, its latency measured
// from the call rather than from the term's start.
func (m *Manager) Replace(ctx context.Context, term Term) (Run, error) {
	return m.take(ctx, term, m.cfg.Clock.Now())
}

func (m *Manager) take(ctx context.Context, term Term, since time.Time) (Run, error) {
	id, err := WorkflowID(term.Project(), term.Queue())
	if err != nil {
		m.metrics.takeover(ctx, term.Project(), term.Queue(), "invalid", PathStart)
		return Run{}, fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(term.Context(), func() { cancel(fmt.Errorf("%w: term ended", ErrSuperseded)) })
	defer stop()

	owner := Owner{Project: term.Project(), Queue: term.Queue(), ServerID: term.LeaderID(), Token: term.Token(),
		ElectionKey: term.Key(), TakeoverStartedAt: m.cfg.Clock.Now()}
	if m.cfg.RunLog != nil && !m.runLogDenied.Load() {
		owner.RunLog = m.cfg.RunLog.Range(owner.Project, owner.Queue)
	}
	log := m.log.With(zap.String("project", owner.Project), zap.String("queue", owner.Queue),
		zap.String("server_id", owner.ServerID), zap.Int64("token", owner.Token), zap.String("workflow_id", id))

	path, backoff := PathStart, m.cfg.RetryMin
	var lastErr error
	attempts := 0
	for attempts < m.cfg.MaxAttempts {
		if attempts > 0 {
			if !clock.Sleep(ctx, m.cfg.Clock, clock.Jitter(m.cfg.Clock, backoff)) {
				break
			}
			backoff = min(2*backoff, m.cfg.RetryMax)
		}
		attempts++
		run, next, err := m.attemptInSlot(ctx, term, id, owner, path, log)
		if err == nil {
			// The last answer may have come in after a pause (SIGSTOP, a stalled VM) that outlived the
			// term: what was confirmed then no longer holds, so the takeover must not report success.
			if cerr := term.Check(); cerr != nil {
				m.endOwnRun(ctx, id, owner, run.RunID, log)
				run, err = Run{}, fmt.Errorf("%w: term ended after the run started: %w", ErrSuperseded, cerr)
			}
		}
		if err == nil {
			run.Attempts = attempts
			run.Latency = m.cfg.Clock.Now().Sub(since)
			m.metrics.takeover(ctx, owner.Project, owner.Queue, "started", run.Path)
			m.metrics.latency(ctx, owner.Project, owner.Queue, run.Latency, run.Path)
			log.Info("dispatcher taken over", zap.String("run_id", run.RunID), zap.String("path", string(run.Path)),
				zap.Int("attempts", attempts), zap.Duration("latency", run.Latency))
			e := m.event(event.TakenOver, term, id)
			e.RunID, e.PriorRunID, e.Reason = run.RunID, run.Owner.PriorRunID, string(run.Path)
			m.cfg.Events.Emit(e)
			return run, nil
		}
		path, lastErr = next, err
		if errors.Is(err, ErrSuperseded) || errors.Is(err, ErrPermanent) {
			break
		}
		log.Info("dispatcher takeover attempt failed; retrying", zap.Int("attempt", attempts), zap.Error(err))
	}
	switch {
	case term.Context().Err() != nil && !errors.Is(lastErr, ErrSuperseded):
		lastErr = fmt.Errorf("%w: term ended: %w", ErrSuperseded, context.Cause(term.Context()))
	case ctx.Err() != nil && !errors.Is(lastErr, ErrSuperseded):
		lastErr = context.Cause(ctx)
	}
	if errors.Is(lastErr, ErrSuperseded) {
		m.metrics.takeover(ctx, owner.Project, owner.Queue, "superseded", path)
		return Run{}, lastErr
	}
	m.metrics.takeover(ctx, owner.Project, owner.Queue, "failed", path)
	return Run{}, fmt.Errorf("%w: %s after %d attempt(s): %w", ErrFailed, id, attempts, lastErr)
}

// attemptInSlot is attempt once one of the Manager's MaxConcurrent slots is free; a ctx (the term)
// that ends first ends the wait.
func (m *Manager) attemptInSlot(ctx context.Context, term Term, id string, owner Owner, path Path, log *zap.Logger) (Run, Path, error) {
	select {
	case m.slots <- struct{}{}:
	case <-ctx.Done():
		return Run{}, path, context.Cause(ctx)
	}
	defer func() { <-m.slots }()
	return m.attempt(ctx, term, id, owner, path, log)
}

// attempt makes one pass: describe, terminate a foreign open run, start, confirm. It returns the path
// the next attempt continues on.
func (m *Manager) attempt(ctx context.Context, term Term, id string, owner Owner, path Path, log *zap.Logger) (Run, Path, error) {
	prior, err := m.describe(ctx, id)
	if err != nil {
		return Run{}, path, err
	}
	if prior.open {
		run, next, err := m.endPrior(ctx, term, id, owner, prior, path, log)
		if err != nil || run.RunID != "" {
			return run, next, err
		}
		path = next
	}
	if err := m.fence(ctx, term); err != nil {
		return Run{}, path, err
	}
	owner.PriorRunID = prior.runID
	started, err := m.start(ctx, id, owner)
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &already):
		// Another run appeared since the describe: look again, never end it blindly.
		return Run{}, PathTerminateFirst, fmt.Errorf("start %s: %w", id, err)
	case err != nil && !m.legacy.Load() && conflictPolicyRefused(err):
		m.legacy.Store(true)
		log.Warn("Temporal refused WorkflowIDConflictPolicy; starting without it (the server's default fails on a running workflow)", zap.Error(err))
		return Run{}, path, fmt.Errorf("start %s: %w", id, err)
	case err != nil:
		return Run{}, path, classify(fmt.Errorf("start %s: %w", id, err))
	}
	run := Run{WorkflowID: id, RunID: started.GetRunID(), FirstRunID: started.GetRunID(), Owner: owner, Path: path}
	if m.cfg.Mode == StartSignalWithStart {
		// Signal-with-start signals a run that is already open instead of failing: only a run that
		// carries this owner was started by this call.
		mine, err := m.describe(ctx, id)
		if err != nil {
			return Run{}, path, err
		}
		if mine.runID != run.RunID || mine.owner.Token != owner.Token || mine.owner.ServerID != owner.ServerID {
			return Run{}, PathTerminateFirst, fmt.Errorf("start %s: signal-with-start reached run %s of %s at token %d, not a run of ours",
				id, mine.runID, mine.owner.ServerID, mine.owner.Token)
		}
		run.FirstRunID = mine.firstRunID
	}
	// Logged before anything reports it or ends it (a run this term may no longer own is ended
	// below): a run Baton could not log stays open, for the next takeover to find and name.
	if err := m.logRun(ctx, owner, run.FirstRunID, run.RunID, owner); err != nil {
		return Run{}, path, err
	}
	run.logged = run.RunID
	if err := m.fence(ctx, term); err != nil {
		if !errors.Is(err, ErrSuperseded) {
			// etcd did not answer: the next attempt finds this run open with our owner and reuses it.
			return Run{}, path, err
		}
		m.endOwnRun(ctx, id, owner, run.RunID, log)
		return Run{}, path, err
	}
	return run, path, nil
}

// endPrior deals with the open run a takeover's describe found: this term's own is reused (returned);
// an earlier owner's is logged and terminated by its run ID, and the path the attempt goes on with is
// returned.
func (m *Manager) endPrior(ctx context.Context, term Term, id string, owner Owner, prior priorRun, path Path, log *zap.Logger) (Run, Path, error) {
	if prior.ownerErr != nil {
		return Run{}, path, prior.ownerErr
	}
	switch {
	case prior.owner.Token == owner.Token && prior.owner.ServerID == owner.ServerID:
		// Its start may have answered too late to be logged (the call timed out on its way back).
		if err := m.logRun(ctx, owner, prior.firstRunID, prior.runID, owner); err != nil {
			return Run{}, path, err
		}
		return Run{WorkflowID: id, RunID: prior.runID, FirstRunID: prior.firstRunID, Owner: owner, Path: PathReused, logged: prior.runID}, path, nil
	case prior.owner.Token > owner.Token:
		if err := m.regressed(ctx, term, owner, prior, log); err != nil {
			return Run{}, path, err
		}
	}
	reason := Reason{Kind: ReasonTakenOver, By: owner.ServerID, Token: owner.Token}.String()
	// Logged before it is ended, as every run Baton ends: should this takeover's start fail and
	// a late start land in between, the next carry-over still finds it.
	if err := m.logRun(ctx, owner, prior.firstRunID, prior.runID, prior.owner); err != nil {
		return Run{}, path, err
	}
	if err := m.terminate(ctx, term, id, prior.runID, "", reason); err != nil {
		return Run{}, path, err
	}
	log.Info("prior dispatcher run terminated", zap.String("prior_run_id", prior.runID),
		zap.String("prior_server_id", prior.owner.ServerID), zap.Int64("prior_token", prior.owner.Token))
	e := m.event(event.PriorTerminated, term, id)
	e.PriorRunID, e.Peer, e.PeerToken = prior.runID, prior.owner.ServerID, prior.owner.Token
	m.cfg.Events.Emit(e)
	if path == PathStart {
		path = PathTerminateFirst
	}
	return Run{}, path, nil
}

// event is an Event of kind k about term's dispatcher workflow id.
func (m *Manager) event(k event.Kind, term Term, id string) event.Event {
	return event.Event{Kind: k, At: m.cfg.Clock.Now(), Project: term.Project(), Queue: term.Queue(), ServerID: term.LeaderID(),
		Key: term.Key(), Token: term.Token(), WorkflowID: id}
}

// regressed is called when the prior run carries a higher token than this term's: a newer owner's
// run (ErrSuperseded), unless etcd still confirms this term: then no newer term can exist, and the
// higher token is a history regression (an etcd restored without --bump-revision, or a move to a new
// cluster), counted and logged; the takeover goes on, since holding the term without a dispatcher
// would wedge the queue.
func (m *Manager) regressed(ctx context.Context, term Term, owner Owner, prior priorRun, log *zap.Logger) error {
	if err := m.fence(ctx, term); errors.Is(err, ErrSuperseded) {
		return fmt.Errorf("%w: run %s is owned by %s at token %d, newer than ours (%d)",
			ErrSuperseded, prior.runID, prior.owner.ServerID, prior.owner.Token, owner.Token)
	} else if err != nil {
		return err
	}
	m.metrics.regression(ctx, owner.Project, owner.Queue)
	log.Error("dispatcher run carries a higher token than the confirmed term: etcd revisions went back (restored without --bump-revision?); replacing the run",
		zap.String("prior_run_id", prior.runID), zap.String("prior_server_id", prior.owner.ServerID),
		zap.Int64("prior_token", prior.owner.Token))
	return nil
}

// logRun records the chain that starts with firstRunID, its latest run lastRunID, in the run log, if
// there is one, in the range of owner's queue (owner.RunLog), as owned by by (the run's owner as its
// memo says; zero for a run Baton did not start). It runs to its end even when the term ends
// meanwhile (bounded by AttemptTimeout): a superseded term's late start is logged, then ended.
func (m *Manager) logRun(ctx context.Context, owner Owner, firstRunID, lastRunID string, by Owner) error {
	if m.cfg.RunLog == nil || owner.RunLog == "" || firstRunID == "" {
		return nil
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.AttemptTimeout)
	defer cancel()
	run := LoggedRun{RunID: firstRunID, Last: lastRunID, ServerID: by.ServerID, Token: by.Token}
	err := m.cfg.RunLog.Record(lctx, owner.RunLog, run)
	if errors.Is(err, ErrRunLogDenied) {
		// An upgrade whose role predates the log: go on as before it, and say so once.
		if m.runLogDenied.CompareAndSwap(false, true) {
			m.log.Error("dispatcher runs are not logged: the carry-over relies on Temporal's visibility alone until the etcd role grants the run log",
				zap.String("range", owner.RunLog), zap.Error(err))
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("takeover: %w", err)
	}
	return nil
}

// endOwnRun terminates a run started by a term that ended on the way. The run is ours alone, so ending
// it by its own run ID cannot touch a successor's. If this fails, the successor's takeover replaces it.
func (m *Manager) endOwnRun(ctx context.Context, id string, owner Owner, runID string, log *zap.Logger) {
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.cfg.AttemptTimeout)
	terr := m.client.TerminateWorkflowWithOptions(tctx, client.TerminateWorkflowOptions{WorkflowID: id, RunID: runID,
		Reason: Reason{Kind: ReasonLateStart, By: owner.ServerID, Token: owner.Token}.String()})
	cancel()
	log.Warn("dispatcher run started by an ended term; terminated by its run ID", zap.String("run_id", runID),
		zap.NamedError("terminate_error", terr))
}

type priorRun struct {
	runID      string
	firstRunID string
	open       bool
	owner      Owner
	ownerErr   error // the memo is there but cannot be read: never act on a guess
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
		return priorRun{}, classify(fmt.Errorf("describe %s: %w", id, err))
	}
	info := resp.GetWorkflowExecutionInfo()
	prior := priorRun{
		runID:      info.GetExecution().GetRunId(),
		firstRunID: info.GetFirstRunId(),
		open:       info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
	}
	if prior.firstRunID == "" {
		prior.firstRunID = prior.runID
	}
	prior.owner, prior.ownerErr = m.ownerOf(info.GetMemo(), id, prior.runID)
	return prior, nil
}

// ownerOf reads the Owner from a run's memo with the configured data converter. A run without the
// memo field (a deployment that predates Baton) counts as token 0 and is always replaced; a field that
// is there but cannot be decoded (the application encrypts payloads and Config.DataConverter is not
// its converter) is an error: the token guard must not silently disappear.
func (m *Manager) ownerOf(memo *commonpb.Memo, id, runID string) (Owner, error) {
	owner, _, err := DecodeOwner(m.cfg.DataConverter, memo)
	if err != nil {
		return Owner{}, fmt.Errorf("%w: %s run %s: %w", ErrPermanent, id, runID, err)
	}
	return owner, nil
}

// DecodeOwner reads the Owner from a dispatcher run's memo with dc, the Temporal client's data
// converter (nil means the SDK's default). found is false when the memo has no owner (a run that
// Baton did not start); an owner that is there but cannot be decoded is an error wrapping
// ErrUnreadableOwner, never a zero Owner.
func DecodeOwner(dc converter.DataConverter, memo *commonpb.Memo) (owner Owner, found bool, err error) {
	p, ok := memo.GetFields()[MemoKey]
	if !ok {
		return Owner{}, false, nil
	}
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	if err := dc.FromPayload(p, &owner); err != nil {
		return Owner{}, true, fmt.Errorf("%w: memo %s: %w (set the Temporal client's data converter in Baton's config)",
			ErrUnreadableOwner, MemoKey, err)
	}
	return owner, true, nil
}

// terminate ends exactly one run after confirming the term: runID, or, with firstRunID, the current
// run of the chain that started with firstRunID (the server refuses when the current run belongs to
// another chain). A run that is already gone is fine.
func (m *Manager) terminate(ctx context.Context, term Term, id, runID, firstRunID, reason string) error {
	if runID == "" && firstRunID == "" {
		return fmt.Errorf("takeover: refusing to terminate %s without a run ID", id)
	}
	if err := m.fence(ctx, term); err != nil {
		return err
	}
	actx, cancel := context.WithTimeout(ctx, m.cfg.AttemptTimeout)
	defer cancel()
	opts := client.TerminateWorkflowOptions{WorkflowID: id, RunID: runID, FirstExecutionRunID: firstRunID, Reason: reason}
	if firstRunID != "" {
		opts.RunID = ""
	}
	err := m.client.TerminateWorkflowWithOptions(actx, opts)
	var notFound *serviceerror.NotFound
	if err != nil && !errors.As(err, &notFound) {
		m.metrics.terminated(ctx, term.Project(), term.Queue(), "error")
		return classify(fmt.Errorf("terminate %s run %s: %w", id, runID+firstRunID, err))
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

func (m *Manager) start(ctx context.Context, id string, owner Owner) (client.WorkflowRun, error) {
	opts := m.startOptions(id, owner)
	actx, cancel := context.WithTimeout(ctx, m.cfg.AttemptTimeout)
	defer cancel()
	opts, args, err := m.prepare(actx, opts, owner)
	if err != nil {
		return nil, err
	}
	if m.cfg.Mode == StartSignalWithStart {
		return m.client.SignalWithStartWorkflow(actx, id, m.cfg.SignalName, owner, opts, m.cfg.WorkflowType, args...)
	}
	return m.client.ExecuteWorkflow(actx, opts, m.cfg.WorkflowType, args...)
}

// startOptions are Baton's start options of owner's run, before a Start hook shapes them.
func (m *Manager) startOptions(id string, owner Owner) client.StartWorkflowOptions {
	taskQueue := m.cfg.TaskQueue
	if taskQueue == "" {
		taskQueue = DefaultTaskQueue(owner.Project, owner.Queue)
	}
	opts := client.StartWorkflowOptions{
		ID:                    id,
		TaskQueue:             taskQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		// Never TERMINATE_EXISTING: the server would end whatever run is current when the request
		// arrives, and a superseded leader's delayed start would kill its successor's run.
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
		Memo:                                     map[string]any{MemoKey: owner},
		// A task held by a crashed worker (any worker: all poll this task queue) is retried after it.
		WorkflowTaskTimeout: m.cfg.WorkflowTaskTimeout,
	}
	if m.legacy.Load() {
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED
	}
	if m.cfg.Mode == StartSignalWithStart {
		// The server supports only USE_EXISTING here: an open run is signalled, not ended; attempt
		// checks whose run the call reached.
		opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING
		if m.legacy.Load() {
			opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED
		}
	}
	return opts
}

// StepDown is called by a gracefully stepping-down owner while its term still holds, before it
// resigns. With TerminateOwnRun it terminates the current run of its own chain (by
// FirstExecutionRunId, after confirming the term), so a run that continued as new is not left behind;
// with LeaveRunning it does nothing. A superseded term terminates nothing and gets ErrSuperseded.
func (m *Manager) StepDown(ctx context.Context, term Term, run Run) error {
	if m.cfg.StepDown == LeaveRunning {
		return nil
	}
	if run.Owner.Token != term.Token() {
		return fmt.Errorf("%w: run %s belongs to token %d, not to this term (%d)", ErrSuperseded, run.RunID, run.Owner.Token, term.Token())
	}
	first := run.chainFirst()
	m.Quiesce(ctx, term, run)
	reason := Reason{Kind: ReasonSteppedDown, By: term.LeaderID(), Token: term.Token()}.String()
	// The chain's record names its latest run, so that the carry-over need not follow a long chain
	// from its first run; as every run Baton ends, it is logged first. A chain still at the run its
	// takeover logged is logged as it is (nothing prunes a live term's own record): writing it again
	// would cost each queue of a stop an etcd write before its successor may start.
	if run.logged != run.RunID {
		if err := m.logRun(ctx, run.Owner, first, run.RunID, run.Owner); err != nil {
			return err
		}
	}
	if err := m.terminate(ctx, term, run.WorkflowID, "", first, reason); err != nil {
		return err
	}
	m.log.Info("own dispatcher run terminated on step-down", zap.String("workflow_id", run.WorkflowID),
		zap.String("run_id", run.RunID), zap.String("first_run_id", first), zap.Int64("token", term.Token()))
	e := m.event(event.SteppedDown, term, run.WorkflowID)
	e.RunID = run.RunID
	m.cfg.Events.Emit(e)
	return nil
}

// Quiesce asks the chain's current run to finish the work in flight (UpdateQuiesce) and waits, at
// most QuiesceTimeout and never into the StepDownReserve at the end of ctx (a ctx with less left
// than that gets half of it), while the term still holds. StepDown calls it
// before it ends the run; a process that is about to stop may call it earlier, before it stops its
// Temporal workers, so that a worker that still holds the run in its cache serves the update at once
// (StepDown's own call then sends nothing once the run is quiesced, and otherwise finds the update by
// its ID, which is the term's; the calls of one term share
// one QuiesceTimeout, so a quiesce that timed out is not waited for again). Whatever the answer, the
// run is ended afterwards: a run that does not handle the update, or does not finish in time, leaves
// its work to the successor (at-least-once), as a crash would. Once quiesced, a run starts no new
// work for the rest of its life. What is left of ctx's deadline is read on the manager's Clock, like
// the bound itself: a caller on a Fake gives it a deadline on the Fake's time.
func (m *Manager) Quiesce(ctx context.Context, term Term, run Run) {
	if m.cfg.QuiesceTimeout < 0 || m.cfg.StepDown == LeaveRunning || term.Check() != nil || run.Owner.Token != term.Token() {
		return
	}
	first := run.chainFirst()
	wait := m.quiesceLeft(term.Token())
	if wait <= 0 {
		return // an earlier call of this term used the whole bound
	}
	if deadline, ok := ctx.Deadline(); ok {
		if left := deadline.Sub(m.cfg.Clock.Now()); left > 2*StepDownReserve {
			wait = min(wait, left-StepDownReserve)
		} else {
			wait = min(wait, left/2)
		}
	}
	qctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	began := m.cfg.Clock.Now()
	h, err := m.client.UpdateWorkflow(qctx, client.UpdateWorkflowOptions{WorkflowID: run.WorkflowID, FirstExecutionRunID: first,
		UpdateName: UpdateQuiesce, UpdateID: fmt.Sprintf("%s-%d", UpdateQuiesce, term.Token()), WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = h.Get(qctx, nil)
	}
	if err != nil {
		m.log.Info("dispatcher run not quiesced before step-down; work in flight is left to the successor",
			zap.String("workflow_id", run.WorkflowID), zap.String("first_run_id", first), zap.Error(err))
		return
	}
	m.quiesced(term.Token())
	m.log.Debug("dispatcher run quiesced", zap.String("workflow_id", run.WorkflowID),
		zap.Duration("took", m.cfg.Clock.Now().Sub(began)))
}

// quiesced records that the term token's run finished its quiesce: the term's later calls (the
// step-down after a Node.Quiesce) have nothing left to wait for and send nothing, which spares a
// stop one Temporal request per queue.
func (m *Manager) quiesced(token int64) {
	m.quiesceMu.Lock()
	defer m.quiesceMu.Unlock()
	m.quiesceUntil[token] = m.cfg.Clock.Now()
}

// quiesceLeft returns what is left of the quiesce bound of the term token, starting it on the
// term's first call. Entries of terms whose bound ran out long ago are dropped: such a term has
// ended (a planned move ends its term right after its quiesce).
func (m *Manager) quiesceLeft(token int64) time.Duration {
	now := m.cfg.Clock.Now()
	m.quiesceMu.Lock()
	defer m.quiesceMu.Unlock()
	until, ok := m.quiesceUntil[token]
	if !ok {
		for t, u := range m.quiesceUntil {
			if now.Sub(u) > time.Hour {
				delete(m.quiesceUntil, t)
			}
		}
		until = now.Add(m.cfg.QuiesceTimeout)
		m.quiesceUntil[token] = until
	}
	return until.Sub(now)
}

// classify wraps ErrPermanent around failures that retrying cannot fix: invalid arguments, a
// namespace that does not exist, permission denied.
func classify(err error) error {
	var (
		invalid    *serviceerror.InvalidArgument
		nsNotFound *serviceerror.NamespaceNotFound
		denied     *serviceerror.PermissionDenied
	)
	if errors.As(err, &invalid) || errors.As(err, &nsNotFound) || errors.As(err, &denied) {
		return fmt.Errorf("%w: %w", ErrPermanent, err)
	}
	return err
}

// conflictPolicyRefused recognises a server too old for WorkflowIDConflictPolicy.
func conflictPolicyRefused(err error) bool {
	var unimplemented *serviceerror.Unimplemented
	return errors.As(err, &unimplemented)
}

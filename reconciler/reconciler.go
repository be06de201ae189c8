package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/takeover"
)

// Temporal is the part of the Temporal client the reconciler uses; client.Client satisfies it.
type Temporal interface {
	TerminateWorkflowWithOptions(ctx context.Context, options client.TerminateWorkflowOptions) error
	// ListWorkflow lists the project's open dispatcher runs (the sweep) and probes visibility before
	// the reconciler stands again after resigning.
	ListWorkflow(ctx context.Context, request *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)
}

var _ Temporal = client.Client(nil)

// Leaders tells who leads the queues; the queues' *election.Elector satisfies it.
type Leaders interface {
	// Leader returns the leader of one queue, or an error wrapping election.ErrNoLeader when nobody
	// leads it; a stale entry's cleanup asks it right before acting.
	Leader(ctx context.Context, project, queue string) (election.Leader, error)
	// Leaders returns the leader of every queue of project that has one, from one read: the sweep
	// decides all the open runs it listed with a single answer, however many there are.
	Leaders(ctx context.Context, project string) (map[string]election.Leader, error)
}

var _ Leaders = (*election.Elector)(nil)

// Term is what a cycle needs of the reconciler's election term; *election.Term satisfies it.
type Term interface {
	Token() int64
	LeaderID() string
	Context() context.Context
	// Check is the local, synchronous test that the term may act.
	Check() error
	// Confirm asks etcd whether the term still holds.
	Confirm(ctx context.Context) error
}

var _ Term = (*election.Term)(nil)

// deleteScript deletes a stale entry only while it is exactly what the cycle classified: the same
// run, token and write time. A heartbeat written in between changes updated_ms and survives.
var deleteScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
local v = redis.call('HMGET', KEYS[1], 'run_id', 'token', 'updated_ms')
if v[1] == ARGV[1] and v[2] == ARGV[2] and v[3] == ARGV[3] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Report is what one reconcile cycle saw and did.
type Report struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// ServerID and Token identify the reconciler leader that ran the cycle.
	ServerID string `json:"server_id"`
	Token    int64  `json:"token"`
	// Scanned counts the heartbeat keys seen, of every project.
	Scanned int `json:"scanned"`
	// Active and Stale count the project's well-formed entries by age at the cycle's Redis time.
	Active int `json:"active"`
	Stale  int `json:"stale"`
	// Protected counts stale entries left alone because their queue has a live leader with the same or
	// a newer fencing token: that leader's heartbeat or takeover deals with them.
	Protected int `json:"protected"`
	// Terminated counts stale runs ended (already closed included); Deleted the keys removed after;
	// Refreshed the stale entries that were written again before their delete and were kept.
	Terminated int `json:"terminated"`
	Deleted    int `json:"deleted"`
	Refreshed  int `json:"refreshed"`
	// Malformed counts entries that could not be decoded; they are also cleanup errors.
	Malformed int `json:"malformed"`
	// CleanupErrors counts entries whose cleanup failed (and malformed ones); they are tried again next
	// cycle.
	CleanupErrors int `json:"cleanup_errors"`
	// Open counts the project's open dispatcher runs that Temporal visibility listed with a readable
	// owner; Orphans those of them terminated because their queue had no leader, or a leader with a
	// newer token; Undecided the listed runs whose owner could not be decided (no readable owner, an
	// owner that does not match the workflow ID, a leader older than the run): left alone.
	Open      int `json:"open"`
	Orphans   int `json:"orphans"`
	Undecided int `json:"undecided"`
	// RedisCalls counts round trips to Redis (a pipeline is one); TemporalCalls the visibility pages
	// and terminations of the sweep.
	RedisCalls    int `json:"redis_calls"`
	TemporalCalls int `json:"temporal_calls"`
	// RedisTime is the Redis server time the entries' ages were judged at. On Redis Cluster each
	// master's entries are judged at that master's time (the heartbeat wrote them with it); this is
	// the first master's, by address.
	RedisTime time.Time `json:"redis_time,omitzero"`
	// Err is why the cycle stopped early, if it did; Error is its text, for JSON.
	Err   error  `json:"-"`
	Error string `json:"error,omitempty"`

	judged map[string]bool   // runs whose heartbeat entry this cycle read: the Redis path decides them
	live   []heartbeat.Entry // the project's entries that are not stale, for the orphan watch's start
}

// Reconciler removes what crashed dispatcher owners left behind: their runs and heartbeat entries.
// Only the project's reconciler leader runs cycles.
type Reconciler struct {
	rdb     redis.UniversalClient
	tc      Temporal
	leaders Leaders
	cfg     Config
	log     *zap.Logger
	metrics *metrics
	limiter *rate.Limiter
	onCycle func(Report)

	mu   sync.Mutex
	last Report
	runs int
}

// New returns a Reconciler. rdb is a single-node, failover or Redis Cluster client; on a cluster
// every master is scanned.
func New(cfg Config, rdb redis.UniversalClient, tc Temporal, leaders Leaders) (*Reconciler, error) {
	switch {
	case rdb == nil:
		return nil, fmt.Errorf("%w: Redis client must not be nil", ErrInvalidConfig)
	case tc == nil:
		return nil, fmt.Errorf("%w: Temporal client must not be nil", ErrInvalidConfig)
	case leaders == nil:
		return nil, fmt.Errorf("%w: Leaders must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	m, err := newMetrics(cfg.MeterProvider, cfg.Project, cfg.Clock.Now)
	if err != nil {
		return nil, fmt.Errorf("reconciler: metrics: %w", err)
	}
	return &Reconciler{
		rdb: rdb, tc: tc, leaders: leaders, cfg: cfg, metrics: m,
		log:     cfg.Logger.With(zap.String("project", cfg.Project), zap.String("server_id", cfg.ServerID)),
		limiter: rate.NewLimiter(rate.Limit(cfg.TerminateRate), cfg.TerminateBurst),
	}, nil
}

// OnCycle sets a function called after every cycle this Reconciler runs, with its report. Set it
// before Run.
func (r *Reconciler) OnCycle(f func(Report)) { r.onCycle = f }

// Last returns the report of the last cycle this process ran and how many it ran; false when none.
func (r *Reconciler) Last() (Report, int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last, r.runs, r.runs > 0
}

// Run campaigns for the project's reconciler election on el (an Elector of its own, with a prefix
// other than the queue elections', conventionally DefaultElectionPrefix) and, while leading, runs a
// cycle at once and then every Interval (jittered by ±10 %). It stops cycling the moment the term
// ends, and returns when ctx ends (resigning the term, so another process takes over at once).
//
// A leader that cannot do the job -- MaxFailedCycles cycles in a row failed, or no cycle succeeded for
// StaleAfter + Interval, because Redis or Temporal does not answer this process -- resigns, so that a
// healthy candidate takes over within an interval instead of cleanup going silent for the whole
// project. It stands again after a backoff, and only once Redis and Temporal answer it.
func (r *Reconciler) Run(ctx context.Context, el *election.Elector) error {
	if el == nil {
		return fmt.Errorf("%w: Elector must not be nil", ErrInvalidConfig)
	}
	backoff := time.Second
	lastCycle := LastCycleKey(el.Config().Prefix, r.cfg.Project)
	for {
		standCtx, resign := context.WithCancelCause(ctx)
		err := el.Run(standCtx, r.cfg.Project, ElectionQueue, r.cfg.ServerID, election.Callbacks{
			OnElected: func(tctx context.Context, term *election.Term) error {
				if err := r.lead(tctx, term, lastCycle); err != nil {
					resign(err)
				}
				return nil
			},
			OnStepDown: func(term *election.Term, cause error) {
				r.log.Info("reconciler leadership ended", zap.Int64("token", term.Token()), zap.Error(cause))
			},
		})
		unhealthy := context.Cause(standCtx)
		resign(nil)
		if err != nil || ctx.Err() != nil {
			return err
		}
		r.log.Warn("reconciler resigned: it cannot complete its cycles; standing again once Redis and Temporal answer",
			zap.Error(unhealthy), zap.Duration("backoff", backoff))
		for {
			if !clock.Sleep(ctx, r.cfg.Clock, clock.Jitter(r.cfg.Clock, backoff)) {
				return nil
			}
			backoff = min(2*backoff, max(r.cfg.Interval, time.Second))
			if err := r.probe(ctx); err == nil {
				break
			} else {
				r.log.Info("reconciler not standing yet", zap.Error(err))
			}
		}
	}
}

// errUnhealthy is why a reconciler leader resigns on its own.
var errUnhealthy = errors.New("reconciler: cycles keep failing")

// lead runs cycles while term holds, recording each completed one at lastCycle (LastCycle). It
// returns an error wrapping errUnhealthy when this process cannot complete its cycles, nil when the
// term ended.
func (r *Reconciler) lead(ctx context.Context, term *election.Term, lastCycle string) error {
	r.log.Info("reconciler leadership started", zap.Int64("token", term.Token()))
	r.metrics.leading.Store(true)
	defer r.metrics.leading.Store(false)
	octx, stop := context.WithCancel(ctx)
	var orphans sync.WaitGroup
	// The term's first cycle tells the orphan watch which queues were vacated before the term began.
	liveAtStart := make(chan []heartbeat.Entry, 1)
	orphans.Go(func() { r.watchOrphans(octx, term, liveAtStart) })
	atStart := liveAtStart // nil once sent
	defer func() { stop(); orphans.Wait() }()
	failed, lastOK := 0, r.cfg.Clock.Now()
	for {
		rep, err := r.Cycle(ctx, term)
		switch {
		case err == nil:
			if atStart != nil {
				atStart <- rep.live
				atStart = nil
			}
			failed, lastOK = 0, r.cfg.Clock.Now()
			if rerr := r.recordCycle(ctx, term, lastCycle, rep); rerr != nil && !errors.Is(rerr, election.ErrNotLeader) {
				r.log.Warn("reconciler cycle not recorded in etcd; operators' checks will see it late", zap.String("key", lastCycle), zap.Error(rerr))
			}
		case !errors.Is(err, ErrNotLeader) && ctx.Err() == nil:
			failed++
			if since := r.cfg.Clock.Now().Sub(lastOK); failed >= r.cfg.MaxFailedCycles || since > r.cfg.StaleAfter+r.cfg.Interval {
				return fmt.Errorf("%w: %d in a row, none succeeded for %v: %w", errUnhealthy, failed, since.Round(time.Millisecond), err)
			}
		}
		if !clock.Sleep(ctx, r.cfg.Clock, clock.Around(r.cfg.Clock, r.cfg.Interval)) {
			return nil
		}
	}
}

// probe tells whether this process can reach Redis and Temporal visibility.
func (r *Reconciler) probe(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if err := r.rdb.Ping(cctx).Err(); err != nil {
		return fmt.Errorf("reconciler: redis PING: %w", err)
	}
	_, err := r.tc.ListWorkflow(cctx, &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1,
		Query: fmt.Sprintf("WorkflowId STARTS_WITH %s", strconv.Quote(takeover.WorkflowIDPrefix(r.cfg.Project)))})
	if err != nil {
		return fmt.Errorf("reconciler: temporal visibility: %w", err)
	}
	return nil
}

// Cycle runs one reconcile pass for term: it scans every heartbeat entry, classifies the project's
// entries as active or stale by Redis server time, and for each stale entry whose queue has no leader
// at the same or a newer token, terminates exactly its run (after confirming term in etcd) and then
// deletes the entry unless it was written again meanwhile. Malformed entries are counted and logged,
// never acted on. It returns the report and the error that stopped it early, if any: a Redis failure
// or ErrNotLeader.
func (r *Reconciler) Cycle(ctx context.Context, term Term) (Report, error) {
	rep := Report{Started: r.cfg.Clock.Now(), ServerID: term.LeaderID(), Token: term.Token(), judged: map[string]bool{}}
	stale, err := r.classify(ctx, term, &rep)
	if err == nil && len(stale) > 0 {
		err = r.cleanAll(ctx, term, stale, &rep)
	}
	// Redis is not the only source of truth: the sweep runs even when Redis failed.
	if !errors.Is(err, ErrNotLeader) {
		if serr := r.sweep(ctx, term, &rep); serr != nil {
			if errors.Is(serr, ErrNotLeader) {
				err = serr
			} else {
				err = errors.Join(err, serr)
			}
		}
	}
	rep.Duration = r.cfg.Clock.Now().Sub(rep.Started)
	rep.Err = err
	if err != nil {
		rep.Error = err.Error()
	}
	result := "ok"
	switch {
	case errors.Is(err, ErrNotLeader):
		result = "not_leader"
		r.log.Info("reconcile cycle stopped: leadership ended", zap.Int64("token", rep.Token), zap.Error(err))
	case err != nil:
		result = "error"
		r.log.Warn("reconcile cycle failed", zap.Int64("token", rep.Token), zap.Error(err),
			zap.Int("scanned", rep.Scanned), zap.Duration("duration", rep.Duration))
	default:
		lvl := zap.DebugLevel
		if rep.Stale > 0 || rep.CleanupErrors > 0 {
			lvl = zap.InfoLevel
		}
		r.log.Log(lvl, "reconcile cycle done", zap.Int64("token", rep.Token), zap.Int("scanned", rep.Scanned),
			zap.Int("active", rep.Active), zap.Int("stale", rep.Stale), zap.Int("protected", rep.Protected),
			zap.Int("terminated", rep.Terminated), zap.Int("deleted", rep.Deleted), zap.Int("refreshed", rep.Refreshed),
			zap.Int("malformed", rep.Malformed), zap.Int("cleanup_errors", rep.CleanupErrors),
			zap.Int("redis_calls", rep.RedisCalls), zap.Duration("duration", rep.Duration))
	}
	r.metrics.cycle(ctx, rep, result)
	if err == nil {
		r.metrics.lastSuccess.Store(r.cfg.Clock.Now().UnixNano())
	}
	r.mu.Lock()
	r.last, r.runs = rep, r.runs+1
	r.mu.Unlock()
	if r.onCycle != nil {
		r.onCycle(rep)
	}
	return rep, err
}

func (r *Reconciler) check(term Term) error {
	if err := term.Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return nil
}

func (r *Reconciler) malformed(ctx context.Context, rep *Report, key string, err error) {
	rep.Malformed++
	rep.CleanupErrors++
	r.metrics.cleanupError(ctx, "malformed")
	r.log.Warn("malformed dispatcher heartbeat entry left alone", zap.String("key", key), zap.Error(err))
}

func isWrongType(err error) bool { return strings.HasPrefix(err.Error(), "WRONGTYPE") }

// cleanAll cleans the stale entries with up to Workers at once (terminations stay bounded by the
// rate limiter) and adds what happened to rep. The first error that must stop the cycle stops the rest.
func (r *Reconciler) cleanAll(ctx context.Context, term Term, stale []staleEntry, rep *Report) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	next := make(chan staleEntry)
	for range min(r.cfg.Workers, len(stale)) {
		wg.Go(func() {
			for e := range next {
				d := Report{judged: map[string]bool{}}
				err := r.clean(ctx, term, e.Entry, e.now, &d)
				mu.Lock()
				rep.add(d)
				if err != nil && firstErr == nil {
					firstErr = err
					cancel()
				}
				mu.Unlock()
			}
		})
	}
feed:
	for _, e := range stale {
		select {
		case next <- e:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		return r.check(term)
	}
	return firstErr
}

// add merges the counts of one entry's cleanup.
func (rep *Report) add(d Report) {
	rep.Protected += d.Protected
	rep.Terminated += d.Terminated
	rep.Deleted += d.Deleted
	rep.Refreshed += d.Refreshed
	rep.CleanupErrors += d.CleanupErrors
	rep.RedisCalls += d.RedisCalls
}

// clean ends one stale entry's run and deletes the entry. Failures specific to the entry are counted
// and logged, and the entry is tried again next cycle; it returns an error only when the cycle must
// stop (leadership lost, ctx ended).
func (r *Reconciler) clean(ctx context.Context, term Term, e heartbeat.Entry, now time.Time, rep *Report) error {
	if err := r.check(term); err != nil {
		return err
	}
	log := r.log.With(zap.String("queue", e.Queue), zap.Duration("age", e.Age(now)), zap.String("workflow_id", e.WorkflowID), zap.String("run_id", e.RunID),
		zap.String("owner", e.ServerID), zap.Int64("owner_token", e.Token), zap.Int64("token", term.Token()))
	fail := func(kind string, err error) error {
		rep.CleanupErrors++
		r.metrics.cleanupError(ctx, kind)
		log.Warn("stale dispatcher cleanup failed; retrying next cycle", zap.String("kind", kind), zap.Error(err))
		return nil
	}

	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	leader, err := r.leaders.Leader(cctx, r.cfg.Project, e.Queue)
	cancel()
	switch {
	case errors.Is(err, election.ErrNoLeader):
	case err != nil:
		// Fail closed: without knowing the queue's leader, do not touch its dispatcher.
		return fail("leader_lookup", err)
	case leader.Token >= e.Token:
		rep.Protected++
		log.Debug("stale entry left to the queue's live leader", zap.String("leader", leader.ID), zap.Int64("leader_token", leader.Token))
		return nil
	}

	if err := r.waitTurn(ctx); err != nil {
		return err
	}
	// The entry may have been written again while we waited: then its owner lives.
	cctx, cancel = context.WithTimeout(ctx, r.cfg.CallTimeout)
	cur, err := r.rdb.HGet(cctx, e.Key, heartbeat.FieldUpdatedMs).Result()
	cancel()
	rep.RedisCalls++
	switch {
	case errors.Is(err, redis.Nil):
		return nil // someone else removed it
	case err != nil:
		return fail("delete", err)
	case cur != strconv.FormatInt(e.UpdatedMs, 10):
		rep.Refreshed++
		log.Info("stale entry was written again before cleanup; kept")
		return nil
	}

	if err := r.confirm(ctx, term); err != nil {
		if errors.Is(err, ErrNotLeader) {
			return err
		}
		return fail("terminate", err)
	}
	if err := r.terminateStale(ctx, term, e, now, log); err != nil {
		return fail("terminate", err)
	}
	rep.Terminated++

	cctx, cancel = context.WithTimeout(ctx, r.cfg.CallTimeout)
	n, err := deleteScript.Run(cctx, r.rdb, []string{e.Key}, e.RunID, strconv.FormatInt(e.Token, 10),
		strconv.FormatInt(e.UpdatedMs, 10)).Int()
	cancel()
	rep.RedisCalls++
	switch {
	case err != nil:
		return fail("delete", err)
	case n == 1:
		rep.Deleted++
	default:
		rep.Refreshed++
		log.Info("stale entry was written again before its delete; kept")
	}
	return nil
}

// terminateStale ends the stale entry e's run (already closed counts as ended) and reports it.
func (r *Reconciler) terminateStale(ctx context.Context, term Term, e heartbeat.Entry, now time.Time, log *zap.Logger) error {
	reason := takeover.Reason{Kind: takeover.ReasonStaleHeartbeat, By: term.LeaderID(), Token: term.Token(),
		Owner: e.ServerID, OwnerToken: e.Token, Stale: e.Age(now)}.String()
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	// By the chain's first run when the entry has it: that reaches the chain's current run after a
	// continue-as-new the entry did not see yet, and the server refuses (NotFound) when the current run
	// belongs to another chain.
	opts := client.TerminateWorkflowOptions{WorkflowID: e.WorkflowID, RunID: e.RunID, Reason: reason}
	if e.FirstRunID != "" {
		opts.RunID, opts.FirstExecutionRunID = "", e.FirstRunID
	}
	err := r.tc.TerminateWorkflowWithOptions(cctx, opts)
	var notFound *serviceerror.NotFound
	ev := event.Event{At: r.cfg.Clock.Now(), Project: r.cfg.Project, Queue: e.Queue, ServerID: r.cfg.ServerID, Token: term.Token(),
		WorkflowID: e.WorkflowID, RunID: e.RunID, Peer: e.ServerID, PeerToken: e.Token}
	switch {
	case err == nil:
		r.metrics.terminated(ctx, "terminated")
		log.Info("stale dispatcher run terminated", zap.Duration("stale_for", e.Age(now)))
		ev.Kind = event.StaleRunTerminated
	case errors.As(err, &notFound):
		r.metrics.terminated(ctx, "already_closed")
		log.Info("stale dispatcher run was already closed")
		ev.Kind = event.StaleRunClosed
	default:
		return err
	}
	r.cfg.Events.Emit(ev)
	return nil
}

// waitTurn waits for the terminate rate limiter. Its ctx ending means the term ended (or Run is
// returning); a caller's deadline that comes before the next token stops the cycle with an error of
// its own, so that a live leader's cycle is not reported as a lost term.
func (r *Reconciler) waitTurn(ctx context.Context) error {
	if err := r.limiter.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		return fmt.Errorf("reconciler: terminate rate limit: %w", err)
	}
	return nil
}

// confirm fences an irreversible action: only a reconciler whose term etcd still confirms terminates
// anything. A lost term wraps ErrNotLeader (the cycle stops); etcd not answering is an error of its own.
func (r *Reconciler) confirm(ctx context.Context, term Term) error {
	if err := r.check(term); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if err := term.Confirm(cctx); err != nil {
		if errors.Is(err, election.ErrNotLeader) {
			return fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		return fmt.Errorf("reconciler: confirm term: %w", err)
	}
	return nil
}

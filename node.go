package baton

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// Errors of a Node's lifecycle.
var (
	// ErrStarted is returned by a second Start.
	ErrStarted = errors.New("baton: node already started")
	// ErrStopped is returned by Start after Stop.
	ErrStopped = errors.New("baton: node stopped")
)

// Node is Baton in one worker process: for every queue it campaigns, takes the dispatcher over when
// it wins, heartbeats the dispatcher and evicts dead workers while it leads; for the project it
// takes part in the reconciler election; and it keeps this worker registered. It owns every
// goroutine it starts: Stop ends and waits for all of them.
type Node struct {
	cfg      Config
	log      *zap.Logger
	etcd     *clientv3.Client
	queues   *election.Elector
	balance  *balance.Runner
	recEl    *election.Elector
	takeover *takeover.Manager
	temporal client.Client // for the progress checks
	hb       *heartbeat.Writer
	rec      *reconciler.Reconciler
	reg      *registry.Registry
	metrics  *metrics
	notify   notifier
	load     loadReporter

	mu    sync.Mutex
	state map[string]*queueState
	// announced is the term OnStartedLeading reported, per queue.
	announced map[string]*election.Term
	worker    workerState
	// checks are the application's additions to readiness (AddReadinessCheck).
	checks  []readinessCheck
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a Node over the application's clients. It validates cfg and starts nothing.
func New(cfg Config, etcd *clientv3.Client, temporal client.Client, rdb redis.UniversalClient) (*Node, error) {
	checked, err := cfg.Check()
	if err != nil {
		return nil, err
	}
	return NewChecked(checked, etcd, temporal, rdb)
}

// NewChecked returns a Node over the application's clients with a configuration that Config.Check
// accepted, so that a caller that checks the configuration early (the Fx module, before it builds
// any client) does not check it twice. It starts nothing.
func NewChecked(checked CheckedConfig, etcd *clientv3.Client, temporal client.Client, rdb redis.UniversalClient) (*Node, error) {
	switch {
	case !checked.ok:
		return nil, fmt.Errorf("%w: the configuration was not checked (Config.Check)", ErrInvalidConfig)
	case etcd == nil:
		return nil, fmt.Errorf("%w: etcd client must not be nil", ErrInvalidConfig)
	case temporal == nil:
		return nil, fmt.Errorf("%w: Temporal client must not be nil", ErrInvalidConfig)
	case rdb == nil:
		return nil, fmt.Errorf("%w: Redis client must not be nil", ErrInvalidConfig)
	}
	cfg := checked.cfg
	n := &Node{cfg: cfg, etcd: etcd, temporal: temporal, state: make(map[string]*queueState, len(cfg.Queues)), announced: make(map[string]*election.Term),
		log: cfg.Logger.With(zap.String("project", cfg.Project), zap.String("server_id", cfg.ServerID))}
	var err error
	if n.queues, err = election.New(etcd, cfg.Election); err != nil {
		return nil, err
	}
	bcfg := cfg.Balance
	bcfg.Project, bcfg.ServerID, bcfg.Queues, bcfg.Version = cfg.Project, cfg.ServerID, cfg.Queues, cfg.Version
	if n.balance, err = balance.New(n.queues, etcd, bcfg); err != nil {
		return nil, err
	}
	if n.takeover, err = takeover.New(temporal, cfg.Takeover); err != nil {
		return nil, err
	}
	if n.hb, err = heartbeat.NewWriter(rdb, cfg.Heartbeat); err != nil {
		return nil, err
	}
	if !cfg.DisableReconciler {
		recElCfg := cfg.Election
		recElCfg.Prefix = cfg.ReconcilerElectionPrefix
		if n.recEl, err = election.New(etcd, recElCfg); err != nil {
			return nil, err
		}
		if n.rec, err = reconciler.New(cfg.Reconciler, rdb, temporal, n.queues); err != nil {
			return nil, err
		}
	}
	if !cfg.DisableRegistry {
		if n.reg, err = registry.New(rdb, cfg.Registry); err != nil {
			return nil, err
		}
	}
	for _, q := range cfg.Queues {
		n.state[q] = &queueState{}
	}
	n.worker.status = make(map[string]registry.Status, len(cfg.Queues))
	n.worker.load = make(map[string]WorkerLoad, len(cfg.Queues))
	n.load.load = cfg.Load
	if n.metrics, err = newMetrics(cfg.MeterProvider, n); err != nil {
		return nil, fmt.Errorf("baton: metrics: %w", err)
	}
	return n, nil
}

// Config returns the configuration in force, defaults applied.
func (n *Node) Config() Config { return n.cfg }

// Registry returns the worker registry, or nil when it is disabled.
func (n *Node) Registry() *registry.Registry { return n.reg }

// Start launches the Node's loops and returns at once. The loops run on a context derived from ctx
// without its cancellation (its values are kept), and are ended by Stop.
//
// With Config.WaitForSession, Start then waits until this process holds an etcd session (its
// campaigns can run), and fails, with every loop stopped, if ctx ends first.
func (n *Node) Start(ctx context.Context) error {
	if err := n.launch(ctx); err != nil {
		return err
	}
	if n.cfg.WaitForSession {
		return n.awaitSession(ctx)
	}
	return nil
}

// launch starts the Node's loops.
func (n *Node) launch(ctx context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	switch {
	case n.stopped:
		return ErrStopped
	case n.started:
		return ErrStarted
	}
	n.started = true
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	n.wg.Go(func() {
		if err := n.balance.Run(runCtx, n.callbacks(runCtx)); err != nil {
			n.log.Error("queue elections stopped", zap.Error(err))
		}
	})
	if n.rec != nil {
		n.wg.Go(func() {
			if err := n.rec.Run(runCtx, n.recEl); err != nil {
				n.log.Error("reconciler stopped", zap.Error(err))
			}
		})
	}
	if n.reg != nil {
		n.wg.Go(func() { n.registerLoop(runCtx) })
	}
	n.log.Info("baton node started", zap.Strings("queues", n.cfg.Queues), zap.Bool("reconciler", n.rec != nil),
		zap.Bool("registry", n.reg != nil))
	return nil
}

// Quiesce prepares a planned stop: every dispatcher run this process leads finishes the dispatches
// in its handlers and starts no new ones (takeover.Manager.Quiesce), all at once, bounded by ctx.
// Stop does the same for each run before it ends it; an application calls Quiesce earlier, before it
// stops its Temporal workers, so that a worker that still holds the run in its cache serves the
// request at once instead of another worker replaying the run's history, which is most of a
// graceful handover's time. Requests sent to a quiesced run are refused with
// dispatcher.ErrTypeHandingOver and sent again by Producers, to the successor. Call it only when Stop
// follows: a quiesced run dispatches nothing for the rest of its life.
func (n *Node) Quiesce(ctx context.Context) {
	type led struct {
		term *election.Term
		run  takeover.Run
	}
	var runs []led
	n.mu.Lock()
	for _, q := range n.cfg.Queues {
		if s := n.state[q]; s.term != nil && s.term.Check() == nil && s.open && s.run.RunID != "" {
			runs = append(runs, led{s.term, s.run})
		}
	}
	n.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() { n.takeover.Quiesce(ctx, r.term, r.run) })
	}
	wg.Wait()
}

// Stop hands every queue over and stops: it resigns every term first (each leader steps down as its
// Takeover.StepDown policy says, so a follower takes over in milliseconds), stops every loop and
// waits for it, deregisters this worker and closes the elections. It returns when all of that is
// done or ctx ends, whichever is first.
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	cancel := n.cancel
	n.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	done := make(chan struct{})
	go func() { n.wg.Wait(); close(done) }()
	var errs []error
	select {
	case <-done:
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("baton: stop: loops still running: %w", ctx.Err()))
	}
	if err := n.notify.wait(ctx); err != nil {
		errs = append(errs, fmt.Errorf("baton: stop: leadership listeners still busy: %w", err))
	}
	if n.reg != nil {
		for _, q := range n.cfg.Queues {
			if err := n.reg.Deregister(ctx, q, n.cfg.ServerID); err != nil && !errors.Is(err, registry.ErrNotFound) {
				errs = append(errs, fmt.Errorf("baton: deregister from %s: %w", q, err))
			}
		}
	}
	if n.recEl != nil {
		if err := n.recEl.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := n.queues.Close(ctx); err != nil {
		errs = append(errs, err)
	}
	n.log.Info("baton node stopped", zap.Errors("errors", errs))
	return errors.Join(errs...)
}

// callbacks returns each queue's election callbacks.
func (n *Node) callbacks(ctx context.Context) func(queue string) election.Callbacks {
	return func(queue string) election.Callbacks {
		return election.Callbacks{
			OnElected: func(tctx context.Context, term *election.Term) error { return n.lead(tctx, queue, term) },
			OnResign:  func(rctx context.Context, term *election.Term) { n.handOver(rctx, queue, term) },
			OnStepDown: func(term *election.Term, cause error) {
				n.metrics.stepDown(ctx, queue, cause)
				var announced bool
				n.update(queue, func(s *queueState) {
					if s.term == term {
						s.term, s.run = nil, takeover.Run{}
					}
					s.lastCause = cause
					if announced = n.announced[queue] == term; announced {
						delete(n.announced, queue)
					}
				})
				if announced {
					n.notify.emit(queue, leadershipEvent{kind: eventStopped, cause: cause})
				}
			},
			OnNewLeader: func(l election.Leader) {
				n.update(queue, func(s *queueState) { s.leader = l })
				n.notify.emit(queue, leadershipEvent{kind: eventNewLeader, leader: l})
			},
		}
	}
}

// lead is one term of one queue: take the dispatcher over, then supervise it -- heartbeat the chain's
// current run, follow continue-as-new, replace a run that closed behind the owner's back (bounded,
// backed off) -- and evict dead workers until the term ends. An error resigns the term so that another
// process can try.
func (n *Node) lead(ctx context.Context, queue string, term *election.Term) error {
	n.update(queue, func(s *queueState) {
		s.term, s.run, s.open, s.lastErr, s.noRunSince, s.hbErr = term, takeover.Run{}, false, nil, time.Now(), nil
		s.handingOver, s.progress, s.stalledSince = false, progress.Report{}, time.Time{}
	})
	var evict sync.WaitGroup
	defer evict.Wait()
	// The eviction loop ends with this callback, not only with the term: a failed takeover returns
	// here to resign, and must not wait for the term to end first.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if n.reg != nil {
		evict.Go(func() { n.evictLoop(ctx, queue, term) })
	}
	tcfg := n.takeover.Config()
	backoff := tcfg.RetryMin
	take := n.takeover.Take
	for replaced := 0; ; replaced, take = replaced+1, n.takeover.Replace {
		// No hand-off between terminating the prior run and starting ours: it would waste the takeover.
		takingOver := n.balance.TakingOver(queue)
		run, err := take(ctx, term)
		takingOver()
		if err != nil {
			n.update(queue, func(s *queueState) {
				s.lastErr = err
				if errors.Is(err, takeover.ErrPermanent) {
					s.permanent = err
				}
			})
			if errors.Is(err, takeover.ErrSuperseded) && term.Err() != nil {
				return nil
			}
			return err
		}
		var announce bool
		n.update(queue, func(s *queueState) {
			s.run, s.open, s.permanent, s.takeovers = run, true, nil, s.takeovers+1
			if announce = n.announced[queue] != term; announce {
				n.announced[queue] = term
			}
		})
		if announce {
			n.notify.emit(queue, leadershipEvent{kind: eventStarted, ctx: term.Context(), lead: Lead{Queue: queue, Token: term.Token(), Run: run, Term: term}})
		}
		err = n.supervise(ctx, queue, term, run)
		if !errors.Is(err, takeover.ErrRunClosed) {
			if term.Err() == nil && err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
		var handingOver bool
		n.update(queue, func(s *queueState) {
			if handingOver = s.handingOver; !handingOver {
				s.open, s.lastErr, s.noRunSince, s.replaced = false, err, time.Now(), s.replaced+1
			}
		})
		if handingOver {
			// The close is this owner's own step-down: the term is about to end.
			return nil
		}
		if replaced >= tcfg.MaxReplacements {
			return fmt.Errorf("baton: %d dispatcher runs closed behind this owner's back in one term; resigning: %w", replaced+1, err)
		}
		n.log.Warn("dispatcher run closed behind its owner's back; replacing it", zap.String("queue", queue),
			zap.Int64("token", term.Token()), zap.Int("replacement", replaced+1), zap.Error(err))
		if !clock.Sleep(ctx, clock.Real(), clock.Jitter(backoff)) {
			return nil
		}
		backoff = min(2*backoff, tcfg.RetryMax)
	}
}

// supervise heartbeats run and watches it until the term ends, the heartbeat is refused (a newer
// owner's entry), or the run closes for good (an error wrapping takeover.ErrRunClosed). A run that
// continues as new is followed: the heartbeat, the status and a step-down name the new current run.
func (n *Node) supervise(ctx context.Context, queue string, term *election.Term, run takeover.Run) error {
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: deferred calls run last-in, first-out
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	runs := make(chan takeover.Run, 1)
	if !n.cfg.Progress.Disabled {
		wg.Go(func() { n.watchProgress(ctx, queue, term) })
	}
	wg.Go(func() {
		if err := n.heartbeat(ctx, term, run, runs); err != nil {
			// Redis holds a newer owner's entry for this dispatcher: this term must not go on.
			n.update(queue, func(s *queueState) { s.lastErr = err })
			cancel(err)
		}
	})
	for {
		next, err := n.takeover.Watch(ctx, term, run)
		if err != nil {
			if errors.Is(err, takeover.ErrRunClosed) {
				return err
			}
			return context.Cause(ctx)
		}
		run = next
		n.update(queue, func(s *queueState) { s.run = run })
		n.metrics.continuedAsNew(ctx, queue)
		select {
		case <-runs:
		default:
		}
		runs <- run
	}
}

// heartbeatResult records the result of a dispatcher heartbeat write of term.
func (n *Node) heartbeatResult(term *election.Term, err error) {
	n.update(term.Queue(), func(s *queueState) {
		switch {
		case s.term != term:
		case err == nil:
			s.hbErr = nil
		case s.hbErr == nil:
			s.hbErr, s.hbFailingSince, s.lastErr = err, time.Now(), err
		default:
			s.hbErr, s.lastErr = err, err
		}
	})
}

// heartbeat writes the heartbeats of the chain's current run, switching to the run that each value
// of runs names.
func (n *Node) heartbeat(ctx context.Context, term *election.Term, run takeover.Run, runs <-chan takeover.Run) error {
	for {
		hctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- n.hb.RunReporting(hctx, term, run, func(err error) { n.heartbeatResult(term, err) }) }()
		select {
		case run = <-runs:
			stop()
			<-done
		case err := <-done:
			stop()
			return err
		}
	}
}

// handOver runs while a graceful stop resigns a live term: the old owner steps down as the
// Takeover.StepDown policy says, and clears its heartbeat entry if it ended its run.
func (n *Node) handOver(ctx context.Context, queue string, term *election.Term) {
	n.mu.Lock()
	s := n.state[queue]
	run := s.run
	owned := s.term == term && run.RunID != ""
	s.handingOver = owned // the run's close that follows is ours: supervision must not replace it
	n.mu.Unlock()
	if !owned {
		return
	}
	if err := n.takeover.StepDown(ctx, term, run); err != nil {
		n.log.Warn("step-down left the dispatcher run to the successor", zap.String("queue", queue), zap.Error(err))
		return
	}
	if n.cfg.Takeover.StepDown == takeover.TerminateOwnRun {
		if err := n.hb.Clear(ctx, term, run); err != nil {
			n.log.Warn("heartbeat entry left for the reconciler", zap.String("queue", queue), zap.Error(err))
		}
	}
}

// evictLoop evicts the queue's dead workers every registry heartbeat interval while the term holds,
// then counts the queue's workers by status for the baton.registry.workers gauge.
func (n *Node) evictLoop(ctx context.Context, queue string, term *election.Term) {
	every := n.cfg.Registry.HeartbeatInterval
	for clock.Sleep(ctx, clock.Real(), clock.Jitter(every)) {
		if _, err := n.reg.Evict(ctx, term, queue); err != nil && ctx.Err() == nil {
			n.log.Warn("worker eviction failed; retrying", zap.String("queue", queue), zap.Error(err))
			continue
		}
		counts, err := n.countWorkers(ctx, queue)
		if err != nil {
			continue
		}
		n.update(queue, func(s *queueState) { s.workers = counts })
	}
}

// countWorkers pages through the queue's workers (at most maxCounted) and counts them by status.
func (n *Node) countWorkers(ctx context.Context, queue string) (map[registry.Status]int, error) {
	const page, maxCounted = 1000, 100_000
	counts := map[registry.Status]int{registry.StatusOnline: 0, registry.StatusDraining: 0, registry.StatusOffline: 0}
	cursor, seen := "", 0
	for seen < maxCounted {
		ws, next, err := n.reg.List(ctx, registry.Filter{Queue: queue}, cursor, page)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			counts[w.Status]++
		}
		seen += len(ws)
		if cursor = next; cursor == "" {
			break
		}
	}
	return counts, nil
}

// registerLoop keeps this worker registered for every queue and heartbeating, re-registering after
// an eviction or a Redis restart, and records whether the registry asks it to drain.
func (n *Node) registerLoop(ctx context.Context) {
	host := hostname()
	registered := make(map[string]bool, len(n.cfg.Queues))
	for {
		for _, q := range n.cfg.Queues {
			if ctx.Err() != nil {
				return
			}
			if !registered[q] {
				_, err := n.reg.Register(ctx, registry.Registration{ServerID: n.cfg.ServerID, Queue: q, Hostname: host,
					PID: os.Getpid(), Version: n.cfg.Version, Capabilities: n.cfg.Capabilities, Labels: n.cfg.Labels,
					MaxConcurrency: n.cfg.MaxConcurrency})
				n.recordWorker(q, err)
				registered[q] = err == nil
				continue
			}
			beat, load := n.load.beat(q)
			status, err := n.reg.Heartbeat(ctx, q, n.cfg.ServerID, beat)
			if err == nil {
				n.load.taken(q, load)
			}
			if errors.Is(err, registry.ErrNotRegistered) {
				registered[q] = false
			}
			n.recordWorker(q, err)
			if err == nil {
				n.mu.Lock()
				n.worker.status[q] = status
				if n.cfg.Load != nil {
					n.worker.load[q] = load
				}
				n.mu.Unlock()
			}
		}
		// A worker asked to drain hands its queues over and stops standing; readiness is unaffected.
		n.balance.SetDraining(n.Draining())
		if !clock.Sleep(ctx, clock.Real(), n.cfg.Registry.HeartbeatInterval) {
			return
		}
	}
}

func (n *Node) recordWorker(queue string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err != nil {
		if n.worker.err == nil && !errors.Is(err, context.Canceled) {
			n.log.Warn("worker registry heartbeat failed; retrying", zap.String("queue", queue), zap.Error(err))
		}
		n.worker.err = err
		return
	}
	if n.worker.err != nil {
		n.log.Info("worker registry heartbeats recovered", zap.String("queue", queue))
	}
	n.worker.err, n.worker.last = nil, time.Now()
}

func (n *Node) update(queue string, f func(s *queueState)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.state[queue]; ok {
		f(s)
	}
}

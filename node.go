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
	hb       *heartbeat.Writer
	rec      *reconciler.Reconciler
	reg      *registry.Registry
	metrics  *metrics

	mu      sync.Mutex
	state   map[string]*queueState
	worker  workerState
	started bool
	stopped bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a Node over the application's clients. It validates cfg and starts nothing.
func New(cfg Config, etcd *clientv3.Client, temporal client.Client, rdb redis.UniversalClient) (*Node, error) {
	switch {
	case etcd == nil:
		return nil, fmt.Errorf("%w: etcd client must not be nil", ErrInvalidConfig)
	case temporal == nil:
		return nil, fmt.Errorf("%w: Temporal client must not be nil", ErrInvalidConfig)
	case rdb == nil:
		return nil, fmt.Errorf("%w: Redis client must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n := &Node{cfg: cfg, etcd: etcd, state: make(map[string]*queueState, len(cfg.Queues)),
		log: cfg.Logger.With(zap.String("project", cfg.Project), zap.String("server_id", cfg.ServerID))}
	var err error
	if n.queues, err = election.New(etcd, cfg.Election); err != nil {
		return nil, err
	}
	bcfg := cfg.Balance
	bcfg.Project, bcfg.ServerID, bcfg.Queues = cfg.Project, cfg.ServerID, cfg.Queues
	if bcfg.Logger == nil {
		bcfg.Logger = cfg.Logger
	}
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
func (n *Node) Start(ctx context.Context) error {
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
				n.update(queue, func(s *queueState) {
					if s.term == term {
						s.term, s.run = nil, takeover.Run{}
					}
					s.lastCause = cause
				})
			},
			OnNewLeader: func(l election.Leader) {
				n.update(queue, func(s *queueState) { s.leader = l })
			},
		}
	}
}

// lead is one term of one queue: take the dispatcher over, then heartbeat it and evict dead workers
// until the term ends. An error resigns the term so that another process can try.
func (n *Node) lead(ctx context.Context, queue string, term *election.Term) error {
	n.update(queue, func(s *queueState) { s.term, s.run, s.lastErr = term, takeover.Run{}, nil })
	run, err := n.takeover.Take(ctx, term)
	if err != nil {
		n.update(queue, func(s *queueState) { s.lastErr = err })
		if errors.Is(err, takeover.ErrSuperseded) {
			return nil
		}
		return err
	}
	n.update(queue, func(s *queueState) { s.run, s.takeovers = run, s.takeovers+1 })

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := n.hb.Run(ctx, term, run); err != nil {
			// Redis holds a newer owner's entry for this dispatcher: this term must not go on.
			n.update(queue, func(s *queueState) { s.lastErr = err })
			cancel(err)
		}
	})
	if n.reg != nil {
		wg.Go(func() { n.evictLoop(ctx, queue, term) })
	}
	<-ctx.Done()
	wg.Wait()
	if err := context.Cause(ctx); term.Err() == nil && err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// handOver runs while a graceful stop resigns a live term: the old owner steps down as the
// Takeover.StepDown policy says, and clears its heartbeat entry if it ended its run.
func (n *Node) handOver(ctx context.Context, queue string, term *election.Term) {
	n.mu.Lock()
	s := n.state[queue]
	run := s.run
	owned := s.term == term && run.RunID != ""
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
			status, err := n.reg.Heartbeat(ctx, q, n.cfg.ServerID, registry.Beat{})
			if errors.Is(err, registry.ErrNotRegistered) {
				registered[q] = false
			}
			n.recordWorker(q, err)
			if err == nil {
				n.mu.Lock()
				n.worker.status[q] = status
				n.mu.Unlock()
			}
		}
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

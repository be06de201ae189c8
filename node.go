package baton

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/ownership"
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

// balancer is all that the Node asks of package balance (*balance.Runner): run the queue elections
// with each queue's ownership callbacks (balance decides when to stand, and wraps them to hand a queue
// over) and report the worker's share. What a queue's lifecycle and balance say to each other is
// ownership.Balancer, and what the worker's registration tells balance is registry.Drainer; nothing
// else couples them.
type balancer interface {
	ownership.Balancer
	Run(ctx context.Context, callbacks func(queue string) election.Callbacks) error
	HandOverWaiting(queue string) string
	Leading() int
	FairShare() int
	Workers() int
}

// Node is Baton in one worker process: for every queue it campaigns, takes the dispatcher over when
// it wins, heartbeats the dispatcher and evicts dead workers while it leads; for the project it
// takes part in the reconciler election; and it keeps this worker registered. It owns every
// goroutine it starts: Stop ends and waits for all of them.
type Node struct {
	cfg      Config
	log      *zap.Logger
	etcd     *clientv3.Client
	queues   *election.Elector
	balance  balancer
	recEl    *election.Elector
	takeover *takeover.Manager
	temporal client.Client // for the progress checks
	hb       *heartbeat.Writer
	rec      *reconciler.Reconciler
	reg      *registry.Registry
	member   *registry.Member // this worker's registration; nil with the registry disabled
	metrics  *metrics
	notify   notifier

	// owned is each queue's ownership lifecycle and its one record (Snapshot).
	owned map[string]*ownership.Queue[*election.Term]

	mu sync.Mutex
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
	n := &Node{cfg: cfg, etcd: etcd, temporal: temporal, owned: make(map[string]*ownership.Queue[*election.Term], len(cfg.Queues)),
		log: cfg.Logger.With(zap.String("project", cfg.Project), zap.String("server_id", cfg.ServerID))}
	var err error
	if n.queues, err = election.New(etcd, cfg.Election); err != nil {
		return nil, err
	}
	bcfg := cfg.Balance
	bcfg.Project, bcfg.ServerID, bcfg.Queues, bcfg.Version = cfg.Project, cfg.ServerID, cfg.Queues, cfg.Version
	if bcfg.Reach == nil { // whether this worker may take a queue another hands over as unfit
		bcfg.Reach = func(ctx context.Context) error {
			_, err := temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		}
	}
	if bcfg.ReachEvery == 0 { // never older than one progress check of the leader that reads it
		bcfg.ReachEvery = cfg.Progress.Interval
	}
	runner, err := balance.New(n.queues, etcd, bcfg)
	if err != nil {
		return nil, err
	}
	n.balance = runner
	if cfg.Takeover.RunLog == nil {
		if cfg.Takeover.RunLog, err = takeover.NewEtcdRunLog(etcd, ""); err != nil {
			return nil, err
		}
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
		if n.member, err = registry.NewMember(n.reg, n.memberConfig(runner)); err != nil {
			return nil, err
		}
	}
	for _, q := range cfg.Queues {
		n.owned[q] = n.newQueue(q)
	}
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
		if err := n.balance.Run(runCtx, n.callbacks()); err != nil {
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
	if n.member != nil {
		n.wg.Go(func() { n.member.Run(runCtx) })
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
// follows: a quiesced run dispatches nothing for the rest of its life. The runs are quiesced in one
// round, Election.MaxHandOvers at once, as Stop hands them over.
func (n *Node) Quiesce(ctx context.Context) {
	inRound(n.cfg.Queues, n.queues.Config().MaxHandOvers, func(q string) { n.owned[q].Quiesce(ctx) })
}

// inRound calls f for every queue, at most limit at once, and returns when every call has returned:
// a step of a stop takes one round for all the queues, never a round per queue, and never puts the
// requests of thousands of queues out at once.
func inRound(queues []string, limit int, f func(queue string)) {
	slots := make(chan struct{}, max(limit, 1))
	var wg sync.WaitGroup
	for _, q := range queues {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			f(q)
		})
	}
	wg.Wait()
}

// Stop hands every queue over and stops: it resigns every term first, in one round of parallel
// hand-overs (Election.MaxHandOvers at once; each leader steps down as its Takeover.StepDown policy
// says and resigns right after, so a follower takes over in milliseconds), and the reconciler's term
// beside them; it stops every loop and waits for it, then deregisters this worker from every queue
// (in one round too) while it closes the elections. It returns when all of that is done or ctx
// ends, whichever is first.
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
	errs = append(errs, n.leave(ctx)...)
	n.log.Info("baton node stopped", zap.Errors("errors", errs))
	return errors.Join(errs...)
}

// leave deregisters this worker from every queue, in one round, while it closes the elections
// (each revokes its session's lease), and returns what failed.
func (n *Node) leave(ctx context.Context) []error {
	var mu sync.Mutex
	var errs []error
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	var wg sync.WaitGroup
	if n.reg != nil {
		wg.Go(func() {
			inRound(n.cfg.Queues, n.queues.Config().MaxHandOvers, func(q string) {
				if err := n.reg.Deregister(ctx, q, n.cfg.ServerID); err != nil && !errors.Is(err, registry.ErrNotFound) {
					fail(fmt.Errorf("baton: deregister from %s: %w", q, err))
				}
			})
		})
	}
	for _, el := range []*election.Elector{n.recEl, n.queues} {
		if el != nil {
			wg.Go(func() {
				if err := el.Close(ctx); err != nil {
					fail(err)
				}
			})
		}
	}
	wg.Wait()
	return errs
}

// callbacks returns each queue's election callbacks: its ownership lifecycle's.
func (n *Node) callbacks() func(queue string) election.Callbacks {
	clearEntry := n.cfg.Takeover.StepDown == takeover.TerminateOwnRun
	return func(queue string) election.Callbacks {
		q := n.owned[queue]
		return election.Callbacks{
			OnElected:   q.Lead,
			OnResign:    func(ctx context.Context, term *election.Term) { q.HandOver(ctx, term, clearEntry) },
			OnStepDown:  q.SteppedDown,
			OnNewLeader: q.NewLeader,
		}
	}
}

// memberConfig is this worker as the registry shows it, on every queue of the Node; a drain the
// registry asks for reaches balance directly.
func (n *Node) memberConfig(drainer registry.Drainer) registry.MemberConfig {
	return registry.MemberConfig{
		Worker: registry.Registration{ServerID: n.cfg.ServerID, Hostname: hostname(), PID: os.Getpid(),
			Version: n.cfg.Version, Capabilities: n.cfg.Capabilities, Labels: n.cfg.Labels,
			MaxConcurrency: n.cfg.MaxConcurrency},
		Queues: n.cfg.Queues, Load: n.cfg.Load, Drainer: drainer,
	}
}

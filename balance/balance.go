package balance

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
)

// Runner campaigns for a worker's queues with balancing.
type Runner struct {
	el     *election.Elector
	client *clientv3.Client
	cfg    Config
	// handOver is the election's HandOverTimeout: a hint lives through the hand-over it announces
	// (the quiesce of the leader's run takes up to that), before the winner reads it.
	handOver time.Duration
	log      *zap.Logger
	view     *view
	roster   *roster
	metrics  *balanceMetrics

	mu       sync.Mutex
	records  map[string]*record // one per queue (record.go)
	leading  int                // records held
	lastShed time.Time
	shedding int                    // sheds under way (keeping)
	moves    []time.Time            // sheds within the last MoveWindow
	named    map[string][]time.Time // by server ID: when this worker named it successor, a moment ago
	standing standing               // as last announced to every queue by restand
	started  time.Time              // when Run's campaigns began (vacant.go: Settle counts from here)
}

// standing is what every queue's decision reads of this worker's leadership count and the worker
// count: where it stands against the fair share (Leading against FairShare), the shedding limit
// (shedLimit) and ShedAbove × fair share unrounded (standingOf).
type standing struct {
	vsFair           int
	overLimit, above bool
}

// New returns a Runner campaigning on el; client reads the election keys (the Elector's client).
func New(el *election.Elector, client *clientv3.Client, cfg Config) (*Runner, error) {
	if el == nil || client == nil {
		return nil, fmt.Errorf("%w: Elector and client must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	r := &Runner{el: el, client: client, cfg: cfg, records: make(map[string]*record, len(cfg.Queues)), named: map[string][]time.Time{},
		log:  cfg.Logger.With(zap.String("project", cfg.Project), zap.String("server_id", cfg.ServerID)),
		view: newView(el.Keys().Project(cfg.Project), cfg.ServerID, cfg.Queues)}
	r.handOver = el.Config().HandOverTimeout
	r.view.clk = cfg.Clock
	r.view.onWorkers = r.restand
	r.view.goneFor = 2 * el.Config().TTL // a gone worker's member record, on a lease of that TTL, is gone by then
	r.roster = newRoster(Keys{ElectionPrefix: el.Config().Prefix}, cfg.Project, cfg.ServerID, cfg.Version, el.Config().TTL, r.log, r.view.poke, r.view.wake)
	r.roster.clk, r.roster.me.Since = cfg.Clock, cfg.Clock.Now().UnixNano()
	var err error
	if r.metrics, err = newBalanceMetrics(cfg.MeterProvider, r); err != nil {
		return nil, fmt.Errorf("balance: metrics: %w", err)
	}
	return r, nil
}

// SetDraining tells the Runner whether the registry asks this worker to drain. A draining worker
// hands every queue it leads over (naming successors, paced by ShedInterval, never during a
// takeover) and stands only where nobody else does, so a queue is never left without an owner.
func (r *Runner) SetDraining(draining bool) {
	if r.roster.setDraining(draining) {
		r.log.Info("draining changed", zap.Bool("draining", draining))
		r.view.poke()
	}
}

// TakingOver marks queue's takeover as under way until done is called: a leader must never let a
// queue go between terminating the old run and starting its own, or the takeover is wasted.
func (r *Runner) TakingOver(queue string) (done func()) {
	r.mu.Lock()
	r.recordLocked(queue).takeovers++
	r.mu.Unlock()
	return sync.OnceFunc(func() {
		r.mu.Lock()
		r.recordLocked(queue).takeovers--
		r.mu.Unlock()
		r.view.wake(queue)
	})
}

// Leading returns how many queues this worker leads now.
func (r *Runner) Leading() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading
}

// FairShare returns ceil(queues / workers) as this worker sees it.
func (r *Runner) FairShare() int { return fairShare(len(r.cfg.Queues), r.view.workers()) }

// Workers returns how many workers stand for this worker's queues, this one included.
func (r *Runner) Workers() int { return r.view.workers() }

// Run campaigns for every queue until ctx ends, calling the queue's callbacks (from callbacks) as
// election.Run does; OnNewLeader comes from the Runner's one watch on the election keys rather than a
// watch per queue (see leaders.go), unless balancing is Disabled. It returns when every campaign has
// ended (each held term resigned, as election.Run does).
func (r *Runner) Run(ctx context.Context, callbacks func(queue string) election.Callbacks) error {
	cbs := make(map[string]election.Callbacks, len(r.cfg.Queues))
	newLeader := map[string]func(election.Leader){} // served from the view (leaders.go)
	for _, q := range r.cfg.Queues {
		cb := callbacks(q)
		if cb.OnElected == nil {
			return fmt.Errorf("%w: Callbacks.OnElected must not be nil", ErrInvalidConfig)
		}
		if !r.cfg.Disabled && cb.OnNewLeader != nil {
			newLeader[q], cb.OnNewLeader = cb.OnNewLeader, nil
		}
		cbs[q] = cb
	}
	// The view outlives the queues' campaigns by the hand-offs of a stop: a leader that resigns
	// watches its named successor step into line first.
	vctx, vcancel := context.WithCancel(context.WithoutCancel(ctx))
	var vwg sync.WaitGroup
	defer func() { vcancel(); vwg.Wait() }()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if !r.cfg.Disabled {
		ready, members := make(chan struct{}), make(chan struct{})
		vwg.Go(func() { r.view.run(vctx, r.client, r.el.Config().RetryMax, relistEvery*r.el.Config().TTL, ready) })
		vwg.Go(func() { r.view.notify(vctx) })
		if len(newLeader) > 0 {
			vwg.Go(func() { r.view.deliverLeaders(vctx, newLeader) })
		}
		vwg.Go(func() { r.roster.run(vctx, r.client, r.el.Config().RetryMax, members) })
		if r.cfg.Reach != nil {
			vwg.Go(func() { r.checkReach(ctx) })
		}
		// Others must know this worker's version before its first candidacy shows, or they would take
		// it for a worker of unknown version and hold every rebalancing move until they see it. That
		// wait is bounded by the election TTL: a record etcd refuses (a role without the balance
		// prefix) must not keep the worker out of every election. Without it others only hold their
		// rebalancing moves, which is safe.
		wctx, wcancel := context.WithTimeout(ctx, r.el.Config().TTL)
		for _, c := range []chan struct{}{ready, members, r.roster.published} {
			select {
			case <-c:
			case <-wctx.Done():
			}
		}
		wcancel()
	}
	if !r.cfg.Disabled {
		// A worker that stands for no queue (most wait) keeps a session all the same: it is ready to
		// take a queue over, and its readiness says so.
		var kwg sync.WaitGroup
		defer func() { cancel(); kwg.Wait() }()
		kwg.Go(func() { _ = r.el.KeepSession(ctx) })
	}
	r.mu.Lock()
	r.started = r.cfg.Clock.Now()
	r.mu.Unlock()
	for q, cb := range cbs {
		cbs[q] = r.wrap(q, cb)
	}
	return r.dispatch(ctx, cbs)
}

// wrap adds the Runner's bookkeeping to a queue's callbacks: what it holds, and who it won from.
func (r *Runner) wrap(queue string, cb election.Callbacks) election.Callbacks {
	wrapped := cb
	wrapped.OnElected = func(tctx context.Context, term *election.Term) error {
		r.setHeld(queue, true)
		if !r.cfg.Disabled {
			r.won(tctx, queue)
		}
		return cb.OnElected(tctx, term)
	}
	wrapped.OnStepDown = func(term *election.Term, cause error) {
		r.setHeld(queue, false)
		if cb.OnStepDown != nil {
			cb.OnStepDown(term, cause)
		}
	}
	return wrapped
}

// stand campaigns for queue until the worker should step back (withdraw a candidacy, or hand a term
// over), or ctx ends; shed reports a term handed over to balance leadership.
func (r *Runner) stand(ctx context.Context, queue string, cb election.Callbacks) (shed bool, err error) {
	// A held term outlives ctx by its hand-off: watchStanding names the successor, then stops.
	base := context.WithoutCancel(ctx)
	if r.cfg.Disabled {
		base = ctx // no hand-off: a stop resigns as a plain election does
	}
	qctx, stop := context.WithCancel(base)
	defer stop()
	done := make(chan error, 1)
	go func() { done <- r.el.Run(qctx, r.cfg.Project, queue, r.cfg.ServerID, cb) }()
	return r.watchStanding(ctx, queue, stop, done)
}

// watchStanding lets el.Run campaign for queue until it returns, and stops it when the worker should
// step back; shed reports a term handed over to balance leadership. Run's own resign on cancellation
// makes a held term a graceful handover.
func (r *Runner) watchStanding(ctx context.Context, queue string, stop func(), done <-chan error) (shed bool, err error) {
	if r.cfg.Disabled {
		return false, <-done
	}
	handOver := func(reason string) error {
		if reason == ReasonShed {
			r.mu.Lock()
			r.shedding++
			r.mu.Unlock()
			defer func() {
				r.mu.Lock()
				r.shedding--
				r.mu.Unlock()
			}()
		}
		r.handOff(ctx, queue, reason)
		stop()
		err := <-done
		r.clearHint(ctx, queue)
		if reason == ReasonTransfer {
			r.roster.clearTransfer(ctx, r.client, queue)
		}
		if reason == ReasonUnfit {
			r.Fit(queue) // its next term, if any, judges afresh
		}
		return err
	}
	var retry <-chan time.Time
	for {
		changed := r.view.changedFor(queue)
		if ctx.Err() != nil {
			if r.isHeld(queue) {
				return false, handOver(r.stopReason())
			}
			stop()
			return false, <-done
		}
		if r.isHeld(queue) {
			reason, wait := r.heldMove(ctx, queue)
			if reason != "" {
				r.log.Info("handing a queue over", zap.String("queue", queue), zap.String("reason", reason),
					zap.Int("leading", r.Leading()), zap.Int("fair_share", r.FairShare()), zap.Int("workers", r.view.workers()))
				r.cfg.Events.Emit(event.Event{Kind: event.HandingOver, At: r.cfg.Clock.Now(), Project: r.cfg.Project, Queue: queue,
					ServerID: r.cfg.ServerID, Reason: reason})
				return true, handOver(reason)
			}
			if wait > 0 && retry == nil {
				// Shedding is paced: look again when the next handover is allowed.
				retry = r.cfg.Clock.NewTimer(wait).C()
			}
		} else if r.shouldWithdraw(queue) {
			stop()
			return false, <-done
		}
		select {
		case err := <-done:
			return false, err
		case <-changed:
		case <-retry:
			retry = nil
		case <-ctx.Done():
		}
	}
}

// heldMove returns why the held queue goes now ("" when it stays) and when to look again
// (decideHeld): an operator's transfer, an unfit hand-over, a drain or a shed.
func (r *Runner) heldMove(ctx context.Context, queue string) (string, time.Duration) {
	reason, wait := r.shouldShed(queue)
	shed := moveDecision{reason: reason, wait: wait}
	if _, asked := r.roster.transferTo(queue); asked {
		return decideHeld(shed, true, unfitDecision{}, r.cfg.Grace)
	}
	unfit, move := r.unfitMove(ctx, queue)
	return decideHeld(shed, false, unfitDecision{unfit: unfit, move: move}, r.cfg.Grace)
}

func (r *Runner) setHeld(queue string, held bool) {
	r.mu.Lock()
	r.setHeldLocked(queue, held, r.cfg.Clock.Now())
	r.mu.Unlock()
	r.restand()
}

// restand wakes every queue when this worker's standing moved: as the last worker below its share
// fills it up, not at each of its thousands of wins, and not at each worker that joins the fleet
// unless the fair share it brings changes a decision. At start-up every worker sees every other join
// and leads more by the second; waking all its queues for each would cost queues × workers wake-ups
// per worker.
func (r *Runner) restand() {
	fair := r.FairShare()
	r.mu.Lock()
	now := standingOf(r.leading, fair, r.cfg.ShedAbove)
	moved := now != r.standing
	r.standing = now
	r.mu.Unlock()
	if moved {
		r.view.poke()
	}
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func (r *Runner) isHeld(queue string) bool {
	return r.snapshot(queue).held
}

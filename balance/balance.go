package balance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/internal/names"
)

// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
var ErrInvalidConfig = errors.New("balance: invalid config")

// Config tunes a Runner. The zero value of every field means its documented default.
type Config struct {
	// Project and ServerID are what the worker campaigns with. Required.
	Project, ServerID string
	// Queues the worker campaigns for. Required, distinct.
	Queues []string
	// ShedAbove is the multiple of the fair share above which a worker hands terms over. Default 1.25;
	// at least 1.
	ShedAbove float64
	// ShedInterval is the pause between two handovers of one worker, so that rebalancing never storms.
	// Default 20ms, or MoveWindow / MaxMoves when the move cap allows more moves than that.
	ShedInterval time.Duration
	// Disabled campaigns for every queue all the time, as plain elections do.
	Disabled bool
	// Version of this worker's build, published in its member record. With versions, a rolling deploy
	// moves each queue forward only: never to an older version than the one leading it. Empty: an
	// unversioned worker, never older or newer than another, so it takes no part in forward-only. Every
	// worker, versioned or not, names its successor when it resigns, hands over when draining, and
	// keeps the calm balancer's rules (no rebalancing while workers of two versions are live).
	Version string
	// Grace is how long the other workers defer to a named successor, and at most how long a resigning
	// leader waits for its successor to stand first in line. Default 500ms.
	Grace time.Duration
	// Cooldown is the least time between two balancing moves of one queue: a term younger than this
	// is not shed. Default 5s.
	Cooldown time.Duration
	// MaxMoves caps the balancing moves (sheds) of this worker per MoveWindow. Default 10 per 1s, or
	// one in twenty of the worker's queues if that is more: a cap that does not grow with the queues
	// would take minutes to spread a large fleet's start-up (a worker of 10,000 queues that won half of
	// them at 10 moves per second), while one in twenty per second still moves a queue at most once in
	// a Cooldown and never storms.
	MaxMoves   int
	MoveWindow time.Duration
	// Settle is how long a starting worker looks at the fleet's member records before it stands for a
	// queue nobody stands for, so that workers starting together spread such queues by rank instead of
	// all racing for all of them (see vacant.go). Default 500ms (zero means the default: 1ns stands at
	// once).
	Settle time.Duration
	// VacantWait is how long the second-ranked worker for a queue nobody stands for waits before it
	// stands all the same (the first-ranked one may be gone, slow, or not serve the queue); every
	// other worker waits twice as long. It bounds how long a queue stays without a candidate.
	// Default 1s.
	VacantWait time.Duration
	// Logger receives rebalancing decisions. Default: no-op.
	Logger *zap.Logger
	// Events receives balance's events (event.HandingOver). Optional.
	Events event.Sink
	// MeterProvider receives the owner-change counter and the leading gauge. Default: no-op.
	MeterProvider metric.MeterProvider
}

func (c Config) withDefaults() Config {
	if c.ShedAbove == 0 {
		c.ShedAbove = 1.25
	}
	if c.Grace == 0 {
		c.Grace = 500 * time.Millisecond
	}
	if c.Cooldown == 0 {
		c.Cooldown = 5 * time.Second
	}
	if c.MaxMoves == 0 {
		c.MaxMoves = max(10, len(c.Queues)/20)
	}
	if c.MoveWindow == 0 {
		c.MoveWindow = time.Second
	}
	if c.Settle == 0 {
		c.Settle = 500 * time.Millisecond
	}
	if c.VacantWait == 0 {
		c.VacantWait = time.Second
	}
	if c.ShedInterval == 0 {
		c.ShedInterval = min(20*time.Millisecond, c.MoveWindow/time.Duration(max(c.MaxMoves, 1)))
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	return c
}

// Validate checks the configuration after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	if err := election.ValidateName("Project", c.Project); err != nil {
		return configerr.Under(ErrInvalidConfig, "", err, nil)
	}
	seen := map[string]bool{}
	for i, q := range c.Queues {
		if err := election.ValidateName(fmt.Sprintf("Queues[%d]", i), q); err != nil {
			return configerr.Under(ErrInvalidConfig, "", err, nil)
		}
		if seen[q] {
			return bad(fmt.Sprintf("Queues[%d]", i), "%q is listed twice", q)
		}
		seen[q] = true
	}
	switch {
	case c.ServerID == "":
		return bad("ServerID", "must not be empty")
	case len(c.Queues) == 0:
		return bad("Queues", "must name at least one queue")
	case c.ShedAbove < 1:
		return bad("ShedAbove", "must be at least 1, got %v", c.ShedAbove)
	case c.ShedInterval <= 0:
		return bad("ShedInterval", "must be positive, got %v", c.ShedInterval)
	case c.Grace <= 0:
		return bad("Grace", "must be positive, got %v", c.Grace)
	case c.Cooldown < 0:
		return bad("Cooldown", "must not be negative, got %v", c.Cooldown)
	case c.MaxMoves < 1:
		return bad("MaxMoves", "must be at least 1, got %d", c.MaxMoves)
	case c.MoveWindow <= 0:
		return bad("MoveWindow", "must be positive, got %v", c.MoveWindow)
	case c.Settle < 0:
		return bad("Settle", "must not be negative, got %v", c.Settle)
	case c.VacantWait < 0:
		return bad("VacantWait", "must not be negative, got %v", c.VacantWait)
	}
	if err := names.Check(c.Version); c.Version != "" && err != nil {
		return bad("Version", "%s %v", names.Quote(c.Version), err)
	}
	return nil
}

// Runner campaigns for a worker's queues with balancing.
type Runner struct {
	el      *election.Elector
	client  *clientv3.Client
	cfg     Config
	log     *zap.Logger
	view    *view
	roster  *roster
	metrics *balanceMetrics

	mu         sync.Mutex
	held       map[string]bool
	heldSince  map[string]time.Time
	busy       map[string]int // queues whose takeover is under way: never handed off meanwhile
	lastShed   time.Time
	shedding   int                    // sheds under way (keeping)
	moves      []time.Time            // sheds within the last MoveWindow
	lastLeader map[string]string      // who led each queue last, as seen here
	named      map[string][]time.Time // successors this worker named a moment ago
	standing   standing               // as last announced to every queue by restand
	started    time.Time              // when Run's campaigns began (vacant.go: Settle counts from here)
}

// standing is what every queue's decision reads of this worker's leadership count and the worker
// count: where it stands against the fair share (Leading against FairShare), the shedding limit
// (overShare) and ShedAbove × fair share unrounded (aboveShedAbove).
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
	cfg = cfg.withDefaults()
	r := &Runner{el: el, client: client, cfg: cfg, held: map[string]bool{}, heldSince: map[string]time.Time{},
		busy: map[string]int{}, lastLeader: map[string]string{}, named: map[string][]time.Time{},
		log:  cfg.Logger.With(zap.String("project", cfg.Project), zap.String("server_id", cfg.ServerID)),
		view: newView(el.Keys().Project(cfg.Project), cfg.ServerID, cfg.Queues)}
	r.view.onWorkers = r.restand
	r.view.goneFor = 2 * el.Config().TTL // a gone worker's member record, on a lease of that TTL, is gone by then
	r.roster = newRoster(Keys{ElectionPrefix: el.Config().Prefix}, cfg.Project, cfg.ServerID, cfg.Version, el.Config().TTL, r.log, r.view.poke, r.view.wake)
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
	r.busy[queue]++
	r.mu.Unlock()
	return sync.OnceFunc(func() {
		r.mu.Lock()
		if r.busy[queue]--; r.busy[queue] <= 0 {
			delete(r.busy, queue)
		}
		r.mu.Unlock()
		r.view.wake(queue)
	})
}

// Leading returns how many queues this worker leads now.
func (r *Runner) Leading() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held)
}

// FairShare returns ceil(queues / workers) as this worker sees it.
func (r *Runner) FairShare() int {
	w := r.view.workers()
	if w < 1 {
		w = 1
	}
	return (len(r.cfg.Queues) + w - 1) / w
}

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
		vwg.Go(func() { r.view.run(vctx, r.client, r.el.Config().RetryMax, ready) })
		vwg.Go(func() { r.view.notify(vctx) })
		if len(newLeader) > 0 {
			vwg.Go(func() { r.view.deliverLeaders(vctx, newLeader) })
		}
		vwg.Go(func() { r.roster.run(vctx, r.client, r.el.Config().RetryMax, members) })
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
	r.started = time.Now()
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
			reason, wait := r.shouldShed(queue)
			if reason != "" {
				r.log.Info("handing a queue over", zap.String("queue", queue), zap.String("reason", reason),
					zap.Int("leading", r.Leading()), zap.Int("fair_share", r.FairShare()), zap.Int("workers", r.view.workers()))
				r.cfg.Events.Emit(event.Event{Kind: event.HandingOver, At: time.Now(), Project: r.cfg.Project, Queue: queue,
					ServerID: r.cfg.ServerID, Reason: reason})
				return true, handOver(reason)
			}
			if wait > 0 && retry == nil {
				// Shedding is paced: look again when the next handover is allowed.
				retry = time.After(wait)
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

func (r *Runner) setHeld(queue string, held bool) {
	r.mu.Lock()
	if held {
		r.held[queue], r.heldSince[queue] = true, time.Now()
	} else {
		delete(r.held, queue)
		delete(r.heldSince, queue)
	}
	r.mu.Unlock()
	r.restand()
}

// restand wakes every queue when this worker's standing moved: as the last worker below its share
// fills it up, not at each of its thousands of wins, and not at each worker that joins the fleet
// unless the fair share it brings changes a decision. At start-up every worker sees every other join
// and leads more by the second; waking all its queues for each would cost queues × workers wake-ups
// per worker.
func (r *Runner) restand() {
	w := max(r.view.workers(), 1)
	fair := (len(r.cfg.Queues) + w - 1) / w
	r.mu.Lock()
	led := len(r.held)
	now := standing{vsFair: cmpInt(led, fair),
		overLimit: led > int(math.Ceil(float64(fair)*r.cfg.ShedAbove)),
		above:     float64(led) > float64(fair)*r.cfg.ShedAbove}
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
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[queue]
}

// mayStand: a key of this worker's stands first although the worker does not campaign for the queue
// (left by a campaign that failed in flight, or by an earlier process with the same server ID:
// standing again replaces it, so the queue is never blocked behind it); nobody stands for the queue,
// and this worker's turn for it has come (vacant.go: it must not stay without a leader). Otherwise:
// while the leader names a successor, only the successor; a draining worker, never; during a rollout,
// only a worker newer than the leader (forward only, no rebalancing); else below the fair share, and
// only behind a leader that may shed (it leads more than ShedAbove × fair share): standing in line
// behind any other leader would gain this worker nothing, and at start-up every worker would stand
// for every queue.
func (r *Runner) mayStand(queue string) bool {
	ok, _ := r.mayStandIn(queue)
	return ok
}

// mayStandIn is mayStand, and for a vacant queue whose turn has not come, how long until it does.
func (r *Runner) mayStandIn(queue string) (bool, time.Duration) {
	l := r.view.leader(queue)
	if l == r.cfg.ServerID {
		return true, 0
	}
	if l == "" {
		wait := r.vacantWait(queue)
		return wait <= 0, wait
	}
	r.mu.Lock()
	r.lastLeader[queue] = l
	r.mu.Unlock()
	if h, ok := r.roster.hintFor(queue, 2*r.cfg.Grace); ok && h.To != "" && h.From == l {
		return h.To == r.cfg.ServerID, 0
	}
	if r.roster.draining() {
		return false, 0
	}
	if m, ok := r.roster.member(l); ok && m.Draining {
		// The leader hands over only to a worker that stands for this queue: stand, so that it can.
		return true, 0
	}
	if r.inRollout() {
		return r.rolloutStand(l), 0
	}
	fair := r.FairShare()
	return r.Leading() < fair && float64(r.view.leads(l)) > float64(fair)*r.cfg.ShedAbove, 0
}

// shouldWithdraw: a candidate in line that may not stand steps out, but only behind another worker's
// leader, so that two candidates never step out of a queue together and leave it empty.
func (r *Runner) shouldWithdraw(queue string) bool {
	l := r.view.leader(queue)
	return l != "" && l != r.cfg.ServerID && !r.mayStand(queue)
}

func (r *Runner) overShare() bool {
	limit := int(math.Ceil(float64(r.FairShare()) * r.cfg.ShedAbove))
	return r.keeping() > limit
}

// aboveShedAbove reports whether this worker leads more than ShedAbove × its fair share itself, before
// the rounding up that overShare's limit takes (which lets 2 queues on 2 workers stay 2 and 0).
func (r *Runner) aboveShedAbove() bool {
	return float64(r.keeping()) > float64(r.FairShare())*r.cfg.ShedAbove
}

// keeping returns how many queues this worker leads, less those it is shedding: a hand-off takes
// Grace-scale time (the successor steps into line, and its watch must be in sync), and the decision
// for the next queue must not count the one already on its way, or 2 queues on 2 workers would both
// go, and come back.
func (r *Runner) keeping() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held) - r.shedding
}

// shouldShed returns why the held queue should be handed over now, or "" and how long until it may
// be worth looking again (0: only when the candidates change). A queue whose takeover is under way is
// never handed over. A draining worker hands every queue over to whoever may take it. Otherwise,
// outside a rollout, a queue held for at least Cooldown moves when this worker leads more than
// ceil(ShedAbove × fair share), or more than ShedAbove × fair share unrounded while a worker standing
// for the queue leads at least two fewer (small fleets: 2 queues on 2 workers end 1 and 1; the move
// never makes the receiver lead more than this worker then does, so nothing moves back). A worker
// within ShedAbove × fair share moves nothing: after a stop-then-start deploy of 5 workers over 100
// queues, 25, 25, 25, 25 and 0 stay so, where balancing would hand 20 queues over a second time.
// Moves are paced: ShedInterval apart and at most MaxMoves per MoveWindow.
func (r *Runner) shouldShed(queue string) (string, time.Duration) {
	r.mu.Lock()
	busy, since := r.busy[queue] > 0, r.heldSince[queue]
	r.mu.Unlock()
	if busy {
		return "", 0 // TakingOver's done wakes the queue
	}
	reason := ""
	switch {
	case r.roster.draining():
		if r.takerOf(queue) == "" {
			return "", 0 // the queue keeps its leader until a worker that serves it stands (HandOverWaiting)
		}
		reason = ReasonDrain
	case r.keeping() <= r.FairShare(), r.inRollout(), r.unknownCandidate():
		return "", 0
	case time.Since(since) < r.cfg.Cooldown:
		return "", r.cfg.Cooldown - time.Since(since)
	case !r.view.othersStand(queue, r.cfg.ServerID):
		return "", 0
	case r.overShare(), r.aboveShedAbove() && r.lighterInLine(queue, r.keeping()-2):
		reason = ReasonShed
	default:
		// Another queue's change may make a lighter worker visible here: look again now and then.
		return "", clock.Jitter(r.cfg.MoveWindow)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	r.moves = slices.DeleteFunc(r.moves, func(t time.Time) bool { return now.Sub(t) >= r.cfg.MoveWindow })
	if wait := r.cfg.ShedInterval - now.Sub(r.lastShed); wait > 0 {
		return "", wait
	}
	if reason == ReasonShed && len(r.moves) >= r.cfg.MaxMoves {
		return "", r.cfg.MoveWindow - now.Sub(r.moves[0])
	}
	r.lastShed = now
	if reason == ReasonShed {
		r.moves = append(r.moves, now)
	}
	return reason, 0
}

// lighterInLine reports whether another worker standing for queue leads at most n queues.
func (r *Runner) lighterInLine(queue string, n int) bool {
	counts := r.counts()
	for _, id := range r.view.line(queue) {
		if id != r.cfg.ServerID && counts[id] <= n {
			return true
		}
	}
	return false
}

// unknownCandidate reports whether a worker stands whose member record this worker has not seen yet:
// its version may start a rollout, so balancing waits for it.
func (r *Runner) unknownCandidate() bool {
	for _, id := range r.view.candidateIDs() {
		if _, ok := r.roster.member(id); !ok {
			return true
		}
	}
	return false
}

// takerOf returns the first worker in line for queue, other than this one, that does not drain; ""
// when there is none. A draining worker hands a queue over only to such a worker: workers may serve
// different queues, and a queue handed over with nobody else in line would fall vacant and come back
// to the draining worker, again and again.
func (r *Runner) takerOf(queue string) string {
	for _, id := range r.view.line(queue) {
		if m, _ := r.roster.member(id); id != r.cfg.ServerID && !m.Draining {
			return id
		}
	}
	return ""
}

// HandOverWaiting says why this worker keeps leading queue although it would hand it over, or ""
// when it does not lead the queue or nothing waits: a draining worker keeps a queue that no other
// worker stands for (none serves it, or none is up) until one does.
func (r *Runner) HandOverWaiting(queue string) string {
	if r.cfg.Disabled || !r.isHeld(queue) || !r.roster.draining() || r.takerOf(queue) != "" {
		return ""
	}
	return "draining: no other worker stands for this queue; it stays led here until one does"
}

// stopReason is why a stopping worker hands its queues over: a rollout when a newer version is live.
func (r *Runner) stopReason() string {
	if r.roster.draining() {
		return ReasonDrain
	}
	if on, newest := r.roster.rollout(); on && olderThan(r.cfg.Version, newest) {
		return ReasonRollout
	}
	return ReasonResign
}

// view is one worker's picture of the project's candidates, kept by one watch.
//
// A change of one queue's candidates wakes only the goroutine of that queue (changedFor), at once:
// waking every queue on every key event costs O(queues) per event, O(queues²) for a start-up, which
// at ten thousand queues is minutes of CPU. A change that can move every queue's decision (the set
// of workers, this worker's standing against its fair share, a roster change) is announced to all,
// by poke, at most every notifyEvery, so that a burst of them wakes each queue a few times.
type view struct {
	prefix string // <election prefix>/<project>/
	self   string // this worker's server ID
	queues map[string]bool
	// onWorkers is called when the set of workers changed (after a watch event, not the first read).
	onWorkers func()

	mu         sync.Mutex
	cands      map[string]map[string]cand // queue -> candidate key -> who, since when
	deleted    map[string]time.Time       // queue -> when this worker's watch last saw a key of it go
	ids        map[string]int             // server ID -> candidate keys
	gone       map[string]time.Time       // server IDs that stood and stand no more, since when (vacant.go)
	goneFor    time.Duration              // how long a gone ID is remembered (0: for ever)
	loadedAt   time.Time                  // when the view was last read whole
	led        map[string]int             // server ID -> queues it leads (its key is the oldest)
	idsChanged bool                       // a server ID appeared or disappeared since the last announcement
	ch         chan struct{}              // closed and replaced on every announced change, of any queue
	qch        map[string]chan struct{}   // per queue, closed on a change of that queue or for all
	all        bool                       // the pending announcement is for every queue
	dirty      chan struct{}              // a change waits to be announced
	woken      marks                      // queues woken since dispatch last looked (idle.go)
	newLeaders marks                      // queues whose leader may have changed since deliverLeaders last looked
}

// marks is a set of queues (or all of them) marked since its reader last took it, and a token that
// says so; the view's mutex guards it.
type marks struct {
	queues map[string]bool
	all    bool
	due    chan struct{} // holds a token while something is marked
}

func newMarks() marks { return marks{queues: map[string]bool{}, due: make(chan struct{}, 1)} }

func (m *marks) mark(queue string) {
	m.queues[queue] = true
	token(m.due)
}

func (m *marks) markAll() {
	m.all = true
	token(m.due)
}

// take returns the marked queues and whether all were marked, and forgets them.
func (m *marks) take() (map[string]bool, bool) {
	qs, all := m.queues, m.all
	m.queues, m.all = map[string]bool{}, false
	return qs, all
}

// token puts a token in ch unless one is there.
func token(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

const notifyEvery = 5 * time.Millisecond

// cand is one candidate key: its server ID and create revision (the oldest key leads), and when this
// worker's watch brought it (zero for a key found by a read: it has stood for a while).
type cand struct {
	id  string
	rev int64
}

func newView(prefix, self string, queues []string) *view {
	v := &view{prefix: prefix, self: self, queues: map[string]bool{}, cands: map[string]map[string]cand{}, deleted: map[string]time.Time{},
		ids: map[string]int{}, gone: map[string]time.Time{}, led: map[string]int{}, ch: make(chan struct{}), qch: map[string]chan struct{}{}, dirty: make(chan struct{}, 1),
		woken: newMarks(), newLeaders: newMarks()}
	for _, q := range queues {
		v.queues[q] = true
	}
	return v
}

// changed returns a channel closed at the next announced change of any queue.
func (v *view) changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ch
}

// changedFor returns a channel closed at the next change of queue's candidates, or at the next
// change announced to every queue.
func (v *view) changedFor(queue string) <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.qch[queue]
	if !ok {
		c = make(chan struct{})
		v.qch[queue] = c
	}
	return c
}

// poke marks a change that may move every queue's decision; notify announces it to all.
func (v *view) poke() {
	v.mu.Lock()
	v.all = true
	v.mu.Unlock()
	v.touch()
}

// touch marks a change for the waiters of changed; notify announces it.
func (v *view) touch() { token(v.dirty) }

// wake wakes the waiters of one queue: a change that moves only its decision (a hint, the end of its
// takeover).
func (v *view) wake(queue string) {
	v.mu.Lock()
	v.wakeLocked(queue)
	v.mu.Unlock()
}

// wakeLocked wakes the waiters of one queue; the caller holds mu.
func (v *view) wakeLocked(queue string) {
	if c, ok := v.qch[queue]; ok {
		close(c)
		delete(v.qch, queue)
	}
	v.woken.mark(queue)
}

func (v *view) notify(ctx context.Context) {
	for {
		select {
		case <-v.dirty:
		case <-ctx.Done():
			return
		}
		v.mu.Lock()
		close(v.ch)
		v.ch = make(chan struct{})
		if v.all {
			for _, c := range v.qch {
				close(c)
			}
			v.qch, v.all = map[string]chan struct{}{}, false
			v.woken.markAll()
		}
		v.mu.Unlock()
		if !clock.Sleep(ctx, clock.Real(), notifyEvery) {
			return
		}
	}
}

// workers counts the distinct server IDs standing for this worker's queues, and this worker, which
// is live whether it stands anywhere or not.
func (v *view) workers() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ids[v.self] > 0 {
		return len(v.ids)
	}
	return len(v.ids) + 1
}

// leads returns how many of this worker's queues id leads.
func (v *view) leads(id string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.led[id]
}

func (v *view) othersStand(queue, self string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.cands[queue] {
		if c.id != self {
			return true
		}
	}
	return false
}

// leader returns the server ID of the queue's oldest candidate key, the one etcd lets lead; "" when
// nobody stands.
func (v *view) leader(queue string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.leaderLocked(queue).ID
}

// apply records one key; the caller holds mu. It wakes the queue's waiters when the queue's leader
// changes, or when this worker leads it before or after (a leader's decisions read the whole line):
// a candidate that steps in or out behind another worker's leader moves no decision of this worker's,
// and at start-up every worker's thousands of candidates would otherwise wake every queue of every
// worker once per candidate.
func (v *view) apply(key, value string, rev int64, deleted bool) {
	rest, ok := strings.CutPrefix(key, v.prefix)
	if !ok {
		return
	}
	queue, _, ok := strings.Cut(rest, "/")
	if !ok || !v.queues[queue] {
		return
	}
	before := v.leaderLocked(queue)
	v.record(queue, key, value, rev, deleted)
	after := v.leaderLocked(queue)
	if after != before {
		v.newLeaders.mark(queue)
	}
	if after.ID != before.ID {
		if before.ID != "" {
			if v.led[before.ID]--; v.led[before.ID] <= 0 {
				delete(v.led, before.ID)
			}
		}
		if after.ID != "" {
			v.led[after.ID]++
		}
	}
	if after.ID != before.ID || before.ID == v.self || after.ID == v.self {
		v.wakeLocked(queue)
	}
}

// record stores or removes one candidate key of queue; the caller holds mu.
func (v *view) record(queue, key, value string, rev int64, deleted bool) {
	c := v.cands[queue]
	prior, had := c[key]
	if had {
		if v.ids[prior.id]--; v.ids[prior.id] <= 0 {
			delete(v.ids, prior.id)
			v.markGoneLocked(prior.id)
			v.idsChanged = true
		}
		delete(c, key)
	}
	if deleted {
		if had {
			v.deleted[queue] = time.Now()
		}
		return
	}
	if c == nil {
		c = map[string]cand{}
		v.cands[queue] = c
	}
	c[key] = cand{id: value, rev: rev}
	if v.ids[value]++; v.ids[value] == 1 {
		delete(v.gone, value)
		v.idsChanged = true
	}
}

// load replaces what the view knows with a read of every candidate key, and announces it to every
// queue.
func (v *view) load(kvs []*mvccpb.KeyValue) {
	v.mu.Lock()
	before := v.ids
	v.cands, v.ids, v.led, v.deleted = map[string]map[string]cand{}, map[string]int{}, map[string]int{}, map[string]time.Time{}
	v.loadedAt = time.Now()
	for _, kv := range kvs {
		v.apply(string(kv.Key), string(kv.Value), kv.CreateRevision, false)
	}
	v.newLeaders.markAll() // a queue nobody stands for any more is applied nothing
	for id := range before {
		if v.ids[id] == 0 {
			v.markGoneLocked(id)
		}
	}
	v.idsChanged = false // the poke below announces the read to every queue
	v.mu.Unlock()
	v.poke()
}

// run keeps the view: a read of every candidate key, then a watch from the next revision; after a
// broken watch, read again. ready is closed after the first read.
func (v *view) run(ctx context.Context, client *clientv3.Client, retryMax time.Duration, ready chan struct{}) {
	listWatch(ctx, client, v.prefix, retryMax, ready, v.load, func(evs []*clientv3.Event) {
		v.mu.Lock()
		for _, ev := range evs {
			v.apply(string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.CreateRevision, ev.Type == clientv3.EventTypeDelete)
		}
		// Only a change of the set of workers may move every queue's decision (the fair share), and
		// onWorkers wakes them all when it does; the queues whose candidates changed were woken by
		// apply.
		workers := v.idsChanged
		v.idsChanged = false
		v.mu.Unlock()
		v.touch()
		if workers && v.onWorkers != nil {
			v.onWorkers()
		}
	})
}

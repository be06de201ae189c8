package balance

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
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
	// Default 20ms.
	ShedInterval time.Duration
	// Disabled campaigns for every queue all the time, as plain elections do.
	Disabled bool
	// Logger receives rebalancing decisions. Default: no-op.
	Logger *zap.Logger
}

func (c Config) withDefaults() Config {
	if c.ShedAbove == 0 {
		c.ShedAbove = 1.25
	}
	if c.ShedInterval == 0 {
		c.ShedInterval = 20 * time.Millisecond
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate checks the configuration after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, fmt.Sprintf(format, args...))
	}
	if err := election.ValidateName("Project", c.Project); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	seen := map[string]bool{}
	for i, q := range c.Queues {
		if err := election.ValidateName(fmt.Sprintf("Queues[%d]", i), q); err != nil {
			return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
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
	}
	return nil
}

// Runner campaigns for a worker's queues with balancing.
type Runner struct {
	el     *election.Elector
	client *clientv3.Client
	cfg    Config
	log    *zap.Logger
	view   *view

	mu       sync.Mutex
	held     map[string]bool
	lastShed time.Time
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
	return &Runner{el: el, client: client, cfg: cfg, held: map[string]bool{},
		log:  cfg.Logger.With(zap.String("project", cfg.Project), zap.String("server_id", cfg.ServerID)),
		view: newView(el.Config().Prefix+"/"+cfg.Project+"/", cfg.Queues)}, nil
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
// election.Run does. It returns when every campaign has ended (each held term resigned, as
// election.Run does).
func (r *Runner) Run(ctx context.Context, callbacks func(queue string) election.Callbacks) error {
	for _, q := range r.cfg.Queues {
		if callbacks(q).OnElected == nil {
			return fmt.Errorf("%w: Callbacks.OnElected must not be nil", ErrInvalidConfig)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if !r.cfg.Disabled {
		ready := make(chan struct{})
		wg.Go(func() { r.view.run(ctx, r.client, r.el.Config().RetryMax, ready) })
		wg.Go(func() { r.view.notify(ctx) })
		select {
		case <-ready:
		case <-ctx.Done():
		}
	}
	errs := make(chan error, len(r.cfg.Queues))
	for _, q := range r.cfg.Queues {
		wg.Go(func() { errs <- r.queue(ctx, q, callbacks(q)) })
	}
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		if err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// queue runs one queue: wait until this worker may stand, campaign while it may, and step back
// (withdraw a candidacy, or hand a term over) when the balance says so.
func (r *Runner) queue(ctx context.Context, queue string, cb election.Callbacks) error {
	wrapped := cb
	wrapped.OnElected = func(tctx context.Context, term *election.Term) error {
		r.setHeld(queue, true)
		return cb.OnElected(tctx, term)
	}
	wrapped.OnStepDown = func(term *election.Term, cause error) {
		r.setHeld(queue, false)
		if cb.OnStepDown != nil {
			cb.OnStepDown(term, cause)
		}
	}
	for ctx.Err() == nil {
		if !r.cfg.Disabled && !r.waitMayStand(ctx, queue) {
			return nil
		}
		qctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.el.Run(qctx, r.cfg.Project, queue, r.cfg.ServerID, wrapped) }()
		shed, err := r.watchStanding(queue, stop, done)
		stop()
		if err != nil {
			return err
		}
		if shed {
			// Stay out of this queue's line for a moment, so that the handover goes to the waiting
			// candidate and not back to us.
			clock.Sleep(ctx, clock.Real(), 2*r.cfg.ShedInterval)
		}
	}
	return nil
}

// waitMayStand blocks until this worker should be a candidate for queue; false when ctx ended.
func (r *Runner) waitMayStand(ctx context.Context, queue string) bool {
	for {
		changed := r.view.changed()
		if r.mayStand(queue) {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// watchStanding lets el.Run campaign for queue until it returns, and stops it when the worker should
// step back; shed reports a term handed over to balance leadership. Run's own resign on cancellation
// makes a held term a graceful handover.
func (r *Runner) watchStanding(queue string, stop func(), done <-chan error) (shed bool, err error) {
	if r.cfg.Disabled {
		return false, <-done
	}
	var retry <-chan time.Time
	for {
		changed := r.view.changed()
		if r.isHeld(queue) {
			if r.shouldShed(queue) {
				r.log.Info("handing a queue over to balance leadership", zap.String("queue", queue),
					zap.Int("leading", r.Leading()), zap.Int("fair_share", r.FairShare()), zap.Int("workers", r.view.workers()))
				stop()
				return true, <-done
			}
			if r.overShare() && retry == nil {
				// Shedding is paced: look again when the next handover is allowed.
				retry = time.After(r.cfg.ShedInterval)
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
		}
	}
}

func (r *Runner) setHeld(queue string, held bool) {
	r.mu.Lock()
	if held {
		r.held[queue] = true
	} else {
		delete(r.held, queue)
	}
	r.mu.Unlock()
	r.view.poke()
}

func (r *Runner) isHeld(queue string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held[queue]
}

// mayStand: below the fair share, or nobody stands for the queue (it must not stay without a leader),
// or a key of this worker's stands first although the worker does not campaign for the queue (left by
// a campaign that failed in flight, or by an earlier process with the same server ID): standing again
// replaces it, so the queue is never blocked behind it.
func (r *Runner) mayStand(queue string) bool {
	if r.Leading() < r.FairShare() {
		return true
	}
	l := r.view.leader(queue)
	return l == "" || l == r.cfg.ServerID
}

// shouldWithdraw: a candidate in line at or above its fair share steps out, but only behind another
// worker's leader, so that two candidates never step out of a queue together and leave it empty.
func (r *Runner) shouldWithdraw(queue string) bool {
	if r.Leading() < r.FairShare() {
		return false
	}
	l := r.view.leader(queue)
	return l != "" && l != r.cfg.ServerID
}

func (r *Runner) overShare() bool {
	limit := int(math.Ceil(float64(r.FairShare()) * r.cfg.ShedAbove))
	return r.Leading() > limit
}

// shouldShed: above ShedAbove × fair share, another worker stands for the queue, and the pace allows.
func (r *Runner) shouldShed(queue string) bool {
	if !r.overShare() || !r.view.othersStand(queue, r.cfg.ServerID) {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.lastShed) < r.cfg.ShedInterval {
		return false
	}
	r.lastShed = time.Now()
	return true
}

// view is one worker's picture of the project's candidates, kept by one watch. Changes are announced
// by closing a channel, at most every notifyEvery, so that a burst of changes (a thousand queues
// starting at once) wakes each waiting queue a few times, not a thousand.
type view struct {
	prefix string // <election prefix>/<project>/
	queues map[string]bool

	mu    sync.Mutex
	cands map[string]map[string]cand // queue -> candidate key -> who, since when
	ids   map[string]int             // server ID -> candidate keys
	ch    chan struct{}              // closed and replaced on every announced change
	dirty chan struct{}              // a change waits to be announced
}

const notifyEvery = 5 * time.Millisecond

// cand is one candidate key: its server ID and create revision (the oldest key leads).
type cand struct {
	id  string
	rev int64
}

func newView(prefix string, queues []string) *view {
	v := &view{prefix: prefix, queues: map[string]bool{}, cands: map[string]map[string]cand{},
		ids: map[string]int{}, ch: make(chan struct{}), dirty: make(chan struct{}, 1)}
	for _, q := range queues {
		v.queues[q] = true
	}
	return v
}

func (v *view) changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ch
}

// poke marks a change; notify announces it.
func (v *view) poke() {
	select {
	case v.dirty <- struct{}{}:
	default:
	}
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
		v.mu.Unlock()
		if !clock.Sleep(ctx, clock.Real(), notifyEvery) {
			return
		}
	}
}

// workers counts the distinct server IDs standing for this worker's queues.
func (v *view) workers() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.ids)
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
	var best cand
	for _, c := range v.cands[queue] {
		if best.id == "" || c.rev < best.rev {
			best = c
		}
	}
	return best.id
}

// apply records one key; the caller holds mu.
func (v *view) apply(key, value string, rev int64, deleted bool) {
	rest, ok := strings.CutPrefix(key, v.prefix)
	if !ok {
		return
	}
	queue, _, ok := strings.Cut(rest, "/")
	if !ok || !v.queues[queue] {
		return
	}
	c := v.cands[queue]
	if old, ok := c[key]; ok {
		if v.ids[old.id]--; v.ids[old.id] <= 0 {
			delete(v.ids, old.id)
		}
		delete(c, key)
	}
	if deleted {
		return
	}
	if c == nil {
		c = map[string]cand{}
		v.cands[queue] = c
	}
	c[key] = cand{id: value, rev: rev}
	v.ids[value]++
}

// run keeps the view: a read of every candidate key, then a watch from the next revision; after a
// broken watch, read again. ready is closed after the first read.
func (v *view) run(ctx context.Context, client *clientv3.Client, retryMax time.Duration, ready chan struct{}) {
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		resp, err := client.Get(ctx, v.prefix, clientv3.WithPrefix())
		if err != nil {
			if !clock.Sleep(ctx, clock.Real(), clock.Jitter(backoff)) {
				return
			}
			backoff = min(2*backoff, retryMax)
			continue
		}
		backoff = 50 * time.Millisecond
		v.mu.Lock()
		v.cands, v.ids = map[string]map[string]cand{}, map[string]int{}
		for _, kv := range resp.Kvs {
			v.apply(string(kv.Key), string(kv.Value), kv.CreateRevision, false)
		}
		v.mu.Unlock()
		v.poke()
		if first {
			close(ready)
			first = false
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for wr := range client.Watch(wctx, v.prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			v.mu.Lock()
			for _, ev := range wr.Events {
				v.apply(string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.CreateRevision, ev.Type == clientv3.EventTypeDelete)
			}
			v.mu.Unlock()
			v.poke()
		}
		cancel()
	}
}

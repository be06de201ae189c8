package balance

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// member is what a worker publishes about itself: its version, when it started (age breaks ties
// between successors), whether it drains, and whether its own Temporal client answered its last
// reach check (Config.Reach). Only a worker that says so takes a queue handed over as unfit: a worker
// that does not check (no Reach, or an older build) never says it.
type member struct {
	Version    string `json:"version,omitempty"`
	Since      int64  `json:"since"` // Unix ns
	Draining   bool   `json:"draining,omitempty"`
	TemporalOK bool   `json:"temporal_ok,omitempty"`
}

// hint is a resigning leader's word on a queue: who should win next (empty: nobody in particular)
// and why the queue moves. seen is when this worker saw it: hints are honoured for a grace window on
// the local clock, so clocks of different hosts never need to agree. cleared marks a hint its leader
// has removed after the hand-off: nobody defers to it any more, but the winner, whose term may start
// after the removal reached it, still learns from it why the queue moved.
type hint struct {
	To      string `json:"to,omitempty"`
	From    string `json:"from"`
	Reason  string `json:"reason"`
	seen    time.Time
	cleared bool
}

// roster is one worker's picture of the project's members and hand-off hints, kept by one watch, plus
// this worker's own member record on a lease of its own (so that it goes with the process).
type roster struct {
	keys    Keys
	project string
	prefix  string // keys.Project(project)
	self    string
	clk     clock.Clock
	ttl     time.Duration
	log     *zap.Logger
	poke    func()             // a member changed: every queue's decision may move
	wake    func(queue string) // a queue's hint changed: only that queue's decision may move

	lease     atomic.Int64 // this worker's record lease; 0 until granted
	republish chan struct{}
	published chan struct{} // closed once the record was first published
	once      sync.Once

	mu      sync.Mutex
	me      member
	members map[string]member
	hints   map[string]hint
	// transfers are operators' requests to move a queue (RequestTransfer), by queue.
	transfers map[string]TransferRequest
	versions  int // distinct non-empty versions among members
	newest    string
}

func newRoster(keys Keys, project, self, version string, ttl time.Duration, log *zap.Logger, poke func(), wake func(queue string)) *roster {
	r := &roster{keys: keys, project: project, prefix: keys.Project(project), self: self, clk: clock.Real(), ttl: ttl, log: log, poke: poke, wake: wake,
		republish: make(chan struct{}, 1), published: make(chan struct{}),
		me:      member{Version: version},
		members: map[string]member{}, hints: map[string]hint{}, transfers: map[string]TransferRequest{}}
	r.me.Since = r.clk.Now().UnixNano()
	return r
}

func (r *roster) memberKey(id string) string  { return r.keys.Member(r.project, id) }
func (r *roster) hintKey(queue string) string { return r.keys.Hint(r.project, queue) }

// setDraining changes this worker's published draining flag; it reports whether it changed.
func (r *roster) setDraining(d bool) bool {
	return r.setMe(func(m *member) *bool { return &m.Draining }, d)
}

// setTemporalOK changes this worker's published reach of Temporal; it reports whether it changed.
// The record is republished on a change only: it lives on this worker's lease, so a record that says
// "reachable" is at most one reach check (Config.ReachEvery plus its timeout) old while the worker
// lives, and goes with the worker.
func (r *roster) setTemporalOK(ok bool) bool {
	return r.setMe(func(m *member) *bool { return &m.TemporalOK }, ok)
}

// setMe sets one flag of this worker's member record and asks for it to be republished when it
// changed; it reports whether it did.
func (r *roster) setMe(field func(*member) *bool, v bool) bool {
	r.mu.Lock()
	f := field(&r.me)
	changed := *f != v
	*f = v
	r.mu.Unlock()
	if changed {
		select {
		case r.republish <- struct{}{}:
		default:
		}
	}
	return changed
}

func (r *roster) draining() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.me.Draining
}

func (r *roster) member(id string) (member, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	m, ok := r.members[id]
	return m, ok
}

// rollout reports whether members of two or more versions are live, and the newest version.
func (r *roster) rollout() (bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.versions > 1, r.newest
}

// hintFor returns the live hint of queue: one seen less than maxAge ago and not cleared.
func (r *roster) hintFor(queue string, maxAge time.Duration) (hint, bool) {
	h, ok := r.recentHint(queue, maxAge)
	if !ok || h.cleared {
		return hint{}, false
	}
	return h, true
}

// recentHint returns the hint of queue seen less than maxAge ago, cleared or not.
func (r *roster) recentHint(queue string, maxAge time.Duration) (hint, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	h, ok := r.hints[queue]
	if !ok || r.clk.Now().Sub(h.seen) > maxAge {
		return hint{}, false
	}
	return h, true
}

// readHint reads queue's hint from etcd: for a winner whose watch has not brought the hint yet.
func (r *roster) readHint(ctx context.Context, client *clientv3.Client, queue string) (hint, bool) {
	resp, err := client.Get(ctx, r.hintKey(queue))
	if err != nil || len(resp.Kvs) == 0 {
		return hint{}, false
	}
	var h hint
	if json.Unmarshal(resp.Kvs[0].Value, &h) != nil {
		return hint{}, false
	}
	return h, true
}

// putHint names queue's successor; it lives on this worker's record lease, so it goes with the process.
func (r *roster) putHint(ctx context.Context, client *clientv3.Client, queue string, h hint) error {
	lease := r.lease.Load()
	if lease == 0 {
		return nil
	}
	b, _ := json.Marshal(h)
	_, err := client.Put(ctx, r.hintKey(queue), string(b), clientv3.WithLease(clientv3.LeaseID(lease)))
	return err
}

// recompute refreshes the version summary; the caller holds mu.
func (r *roster) recompute() {
	seen := map[string]bool{}
	r.newest = ""
	for _, m := range r.members {
		if m.Version == "" {
			continue
		}
		seen[m.Version] = true
		if r.newest == "" || compareVersions(m.Version, r.newest) > 0 {
			r.newest = m.Version
		}
	}
	r.versions = len(seen)
}

// transferTo returns the worker an operator asked to move queue to, and whether that is another
// worker than this one (the target, once it leads, has nothing to do).
func (r *roster) transferTo(queue string) (string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.transfers[queue]
	return t.To, ok && t.To != "" && t.To != r.self
}

// clearTransfer deletes queue's transfer request once it was acted on.
func (r *roster) clearTransfer(ctx context.Context, client *clientv3.Client, queue string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := client.Delete(ctx, r.keys.Transfer(r.project, queue)); err != nil {
		r.log.Info("transfer request left to its lease", zap.String("queue", queue), zap.Error(err))
	}
}

// apply records one key; the caller holds mu. It returns the queue whose hint or transfer request
// the key is, or "" for a member record (or a key of neither kind).
func (r *roster) apply(key string, value []byte, deleted bool) (hintOf string) {
	rest, ok := strings.CutPrefix(key, r.prefix)
	if !ok {
		return ""
	}
	kind, name, ok := strings.Cut(rest, "/")
	if !ok {
		return ""
	}
	switch kind {
	case memberDir:
		var m member
		if deleted || json.Unmarshal(value, &m) != nil {
			delete(r.members, name)
		} else {
			r.members[name] = m
		}
		r.recompute()
	case hintDir:
		if deleted {
			if h, ok := r.hints[name]; ok {
				h.cleared = true
				r.hints[name] = h
			}
			return name
		}
		var h hint
		if json.Unmarshal(value, &h) != nil {
			delete(r.hints, name)
			return name
		}
		h.seen = r.clk.Now()
		r.hints[name] = h
		return name
	case transferDir:
		var t TransferRequest
		if deleted || json.Unmarshal(value, &t) != nil {
			delete(r.transfers, name)
		} else {
			r.transfers[name] = t
		}
		return name
	}
	return ""
}

// run keeps this worker's record published and the picture current until ctx ends, then revokes
// the record's lease (removing the record and any hint at once). ready is closed after the first read;
// published, after the record was first written.
func (r *roster) run(ctx context.Context, client *clientv3.Client, retryMax time.Duration, ready chan struct{}) {
	var wg sync.WaitGroup
	wg.Go(func() { r.keep(ctx, client, retryMax) })
	r.watch(ctx, client, retryMax, ready)
	wg.Wait()
}

// keep grants the record's lease, publishes the record and keeps the lease alive; it publishes again
// on every change of the draining flag and after a lost lease. A record etcd refuses (a role without
// the balance prefix) or cannot take is tried again with backoff, not in a loop: the grant before it
// succeeds, so only a published record ends the backoff. The failure is logged when it starts, and
// once more when it ends.
func (r *roster) keep(ctx context.Context, client *clientv3.Client, retryMax time.Duration) {
	const first = 50 * time.Millisecond
	backoff := first
	var failing error
	for ctx.Err() == nil {
		var err error
		if grant, gerr := client.Grant(ctx, int64(r.ttl/time.Second)); gerr != nil {
			err = gerr
		} else {
			kctx, cancel := context.WithCancel(ctx)
			alive, kerr := client.KeepAlive(kctx, grant.ID)
			err = kerr
			if kerr == nil {
				r.lease.Store(int64(grant.ID))
				err = r.serve(kctx, client, grant.ID, alive)
				r.lease.Store(0)
			}
			cancel()
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), r.ttl)
			if _, rerr := client.Revoke(rctx, grant.ID); rerr != nil && ctx.Err() == nil {
				r.log.Warn("balance member lease not revoked; it expires", zap.Error(rerr))
			}
			rcancel()
		}
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			// Published, then the lease was lost: publish again at once.
			if failing != nil {
				r.log.Info("balance member record published again")
				failing = nil
			}
			backoff = first
			continue
		}
		if failing == nil {
			r.log.Warn("balance member record not published; retrying with backoff (hand-overs do not name this worker meanwhile)",
				zap.String("key", r.memberKey(r.self)), zap.Error(err))
		}
		failing = err
		if !clock.Sleep(ctx, r.clk, clock.Jitter(r.clk, backoff)) {
			return
		}
		backoff = min(2*backoff, retryMax)
	}
}

// serve publishes the record on lease and again on every change, until the lease is lost or ctx ends.
// It returns the error of a publish that failed, nil otherwise.
func (r *roster) serve(ctx context.Context, client *clientv3.Client, lease clientv3.LeaseID, alive <-chan *clientv3.LeaseKeepAliveResponse) error {
	publish := func() error {
		r.mu.Lock()
		b, _ := json.Marshal(r.me)
		r.mu.Unlock()
		_, err := client.Put(ctx, r.memberKey(r.self), string(b), clientv3.WithLease(lease))
		return err
	}
	if err := publish(); err != nil {
		return err
	}
	r.once.Do(func() { close(r.published) })
	for {
		select {
		case _, ok := <-alive:
			if !ok {
				return nil
			}
		case <-r.republish:
			if err := publish(); err != nil {
				return err
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// watch keeps the picture: a read of the project's balance keys, then a watch from the next revision.
func (r *roster) watch(ctx context.Context, client *clientv3.Client, retryMax time.Duration, ready chan struct{}) {
	listWatch(ctx, r.clk, client, r.prefix, retryMax, relistEvery*r.ttl, ready, func(kvs []*mvccpb.KeyValue) {
		r.mu.Lock()
		r.members, r.hints = map[string]member{}, map[string]hint{}
		for _, kv := range kvs {
			r.apply(string(kv.Key), kv.Value, false)
		}
		r.recompute()
		r.mu.Unlock()
		r.poke()
	}, func(evs []*clientv3.Event) {
		// A hint wakes its own queue only: a rollout hands thousands of queues over, each with a hint
		// written and cleared, and waking every queue for each would cost queues² wake-ups.
		var hinted []string
		members := false
		r.mu.Lock()
		for _, ev := range evs {
			if q := r.apply(string(ev.Kv.Key), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete); q != "" {
				hinted = append(hinted, q)
			} else {
				members = true
			}
		}
		r.mu.Unlock()
		if members {
			r.poke()
		}
		for _, q := range hinted {
			r.wake(q)
		}
	})
}

// workers returns the member records of ids, in order (known false for an ID without one).
func (r *roster) workers(ids []string) []worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	ws := make([]worker, len(ids))
	for i, id := range ids {
		m, ok := r.members[id]
		ws[i] = worker{id: id, m: m, known: ok}
	}
	return ws
}

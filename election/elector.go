package election

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/event"
)

// Elector runs a process's elections: one etcd session (lease) shared by every campaign, so keepalive
// cost does not grow with the number of queues, replaced by a fresh session after a loss.
type Elector struct {
	client *clientv3.Client
	leases leaser
	cfg    Config
	log    *zap.Logger

	slots *window // campaign requests in flight (Config.MaxCampaignRequests, adapted to etcd's answers)
	// handOvers are the resigns under way (Config.MaxHandOvers).
	handOvers handOvers
	wg        sync.WaitGroup

	// life ends when Close is called (or the client is closed); it stops the revoke retries of
	// sessions lost earlier.
	life    context.Context
	endLife context.CancelFunc

	mu        sync.Mutex
	current   *session
	granting  *grantCall          // the session grant in flight, if any
	campaigns map[string]struct{} // election keys this Elector campaigns for or leads
	stops     map[*int]context.CancelFunc
	closed    bool
}

// New returns an Elector over client. It validates cfg and starts nothing: the first campaign grants
// the session.
func New(client *clientv3.Client, cfg Config) (*Elector, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: client must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	life, endLife := context.WithCancel(client.Ctx())
	return &Elector{
		life:      life,
		endLife:   endLife,
		client:    client,
		leases:    client.Lease,
		cfg:       cfg,
		log:       cfg.Logger,
		slots:     newWindow(cfg),
		handOvers: make(handOvers, cfg.MaxHandOvers),
		campaigns: make(map[string]struct{}),
		stops:     make(map[*int]context.CancelFunc),
	}, nil
}

// Config returns the configuration in force, defaults applied.
func (e *Elector) Config() Config { return e.cfg }

// ElectionKey returns the etcd prefix under which the candidates of (project, queue) live
// (Keys().Election).
func (e *Elector) ElectionKey(project, queue string) string { return e.Keys().Election(project, queue) }

// SessionValidUntil returns when the current session's terms must end unless a keepalive succeeds,
// and false when there is no live session. Health checks use it.
func (e *Elector) SessionValidUntil() (time.Time, bool) {
	e.mu.Lock()
	s := e.current
	e.mu.Unlock()
	if s == nil || s.err() != nil {
		return time.Time{}, false
	}
	return s.validUntil(), true
}

// KeepSession holds a granted session until ctx ends or the Elector is closed, and grants a new one
// after each loss (with jittered backoff, RetryMin doubling to RetryMax, while grants fail). Without
// it a session exists only while something campaigns, and a process that stands for no queue (a
// balancer keeps most workers out of most lines) would have none: SessionValidUntil, and a readiness
// check built on it, would report etcd unreachable, and its first takeover would wait for a grant. It
// returns nil when ctx ends, ErrClosed once the Elector is closed.
func (e *Elector) KeepSession(ctx context.Context) error {
	backoff := e.cfg.RetryMin
	var failing error
	for {
		s, err := e.session(ctx)
		switch {
		case err == nil:
			if failing != nil {
				e.log.Info("election session granted again")
				failing = nil
			}
			backoff = e.cfg.RetryMin
			select {
			case <-s.ctx.Done(): // lost or closed: grant another (or learn of the Close)
			case <-ctx.Done():
				return nil
			}
			continue
		case errors.Is(err, ErrClosed):
			return err
		case ctx.Err() != nil:
			return nil
		}
		if failing == nil {
			e.log.Warn("election session not granted; retrying with backoff", zap.Error(err))
		}
		failing = err
		if !e.sleep(ctx, clock.Jitter(e.cfg.Clock, backoff)) {
			return nil
		}
		backoff = min(2*backoff, e.cfg.RetryMax)
	}
}

// Campaign blocks until this process leads (project, queue) and returns the term, or returns an error
// when ctx ends, the session is lost (an error wrapping ErrSessionLost) or etcd fails. It never blocks
// past the loss of its session. value is what the term is known by, normally the server ID.
func (e *Elector) Campaign(ctx context.Context, project, queue, value string) (*Term, error) {
	return e.campaignFor(ctx, project, queue, value, false)
}

// campaignFor is Campaign; withCallback marks the term as held by a leader callback that Run starts
// (and releases) for it, so that a lost session waits for that callback before revoking its lease.
func (e *Elector) campaignFor(ctx context.Context, project, queue, value string, withCallback bool) (*Term, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, err
	}
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	if err := e.claim(project, queue); err != nil {
		return nil, err
	}
	s, err := e.session(ctx)
	if err != nil {
		e.release(project, queue)
		return nil, err
	}
	t, err := e.campaign(ctx, s, project, queue, value, withCallback)
	if err != nil {
		e.release(project, queue)
		return nil, err
	}
	return t, nil
}

func (e *Elector) claim(project, queue string) error {
	key := e.ElectionKey(project, queue)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return ErrClosed
	}
	if _, ok := e.campaigns[key]; ok {
		return fmt.Errorf("%w: %s", ErrAlreadyCampaigning, key)
	}
	e.campaigns[key] = struct{}{}
	return nil
}

func (e *Elector) release(project, queue string) {
	e.mu.Lock()
	delete(e.campaigns, e.ElectionKey(project, queue))
	e.mu.Unlock()
}

// session returns the live session, granting a new one when there is none. Every caller that finds
// none waits for the same grant and shares its outcome: one LeaseGrant however many queues need the
// session, and when it fails, every campaign backs off on that one failure instead of sending a grant
// of its own after it, one after another (a burst against an etcd that is just coming back, and a
// wait that grows with the number of queues). The grant runs on the Elector's life, not a caller's
// context: a caller that gives up stops waiting without failing the grant for the others.
func (e *Elector) session(ctx context.Context) (*session, error) {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil, ErrClosed
	}
	if cur := e.current; cur != nil && cur.err() == nil {
		e.mu.Unlock()
		return cur, nil
	}
	g := e.granting
	if g == nil {
		g = &grantCall{done: make(chan struct{})}
		e.granting = g
		e.wg.Go(func() { e.grantFor(g) })
	}
	e.mu.Unlock()
	select {
	case <-g.done:
		return g.s, g.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// grantCall is the session grant in flight, shared by every session call that waits for it.
type grantCall struct {
	done chan struct{} // closed once s or err is set
	s    *session
	err  error
}

// grantFor grants the session g waits for and makes it the current one.
func (e *Elector) grantFor(g *grantCall) {
	defer close(g.done)
	s, err := grantSession(e.life, e.leases, e.cfg, &e.wg, e.life)
	e.mu.Lock()
	e.granting = nil
	closed := e.closed
	if err == nil && !closed {
		e.current = s
		e.wg.Go(func() { e.sweep(s) })
	}
	e.mu.Unlock()
	switch {
	case closed:
		if err == nil {
			s.lose(ErrClosed)
		}
		g.err = ErrClosed
	case err != nil:
		g.err = fmt.Errorf("election: grant session lease: %w", err)
	default:
		g.s = s
	}
}

func (e *Elector) campaign(ctx context.Context, s *session, project, queue, value string, withCallback bool) (*Term, error) {
	// The campaign ends with the session: a waiting candidate must never outlive its lease.
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.ctx, func() { cancel(context.Cause(s.ctx)) })
	defer stop()

	prefix := e.ElectionKey(project, queue)
	key := prefix + "/" + leaseHex(s.id)
	line, err := e.enter(cctx, s, prefix, key, value)
	if err != nil {
		if errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) {
			// etcd already dropped our lease: do not wait for the next keepalive to find out.
			s.lose(ErrLeaseNotFound)
		} else if !errors.Is(err, errNotSent) {
			// The put may have been applied although the call failed (its context ended in flight):
			// a key left behind would stand in the election for this live session, blocking the queue
			// for everyone until the session ends. A put never sent left nothing: a balancer that
			// withdraws thousands of waiting candidacies at start-up would otherwise send as many
			// deletes for nothing.
			e.deleteOwnKey(ctx, s, key)
		}
		return nil, campaignErr(cctx, prefix, err)
	}
	// From here on our key exists; any failure must remove it, or this process would hold the
	// election in etcd without knowing.
	rev, watchFrom := line.rev, line.header+1
	abandon := func(err error) (*Term, error) {
		e.deleteKey(ctx, s, key, rev)
		return nil, campaignErr(cctx, prefix, err)
	}
	if line.predecessor != "" {
		if err := e.waitPredecessors(cctx, prefix, key, rev, candidate{line.predecessor, line.predRev}, line.header); err != nil {
			return abandon(err)
		}
		// Verify with a linearizable read that our key is still the oldest, at our revision, on our
		// lease (etcd#11007: a campaign can otherwise return for a key that is already gone). A first
		// candidate needs no such read: the transaction that put its key read the line atomically.
		resp, err := inSlot(cctx, e, func() (*clientv3.GetResponse, error) {
			return e.client.Get(cctx, prefix+"/", clientv3.WithFirstCreate()...)
		})
		if err != nil {
			return abandon(err)
		}
		if len(resp.Kvs) == 0 || string(resp.Kvs[0].Key) != key || resp.Kvs[0].CreateRevision != rev || resp.Kvs[0].Lease != int64(s.id) {
			return abandon(fmt.Errorf("%w: verification read does not show our key first at revision %d", ErrKeyLost, rev))
		}
		watchFrom = resp.Header.Revision + 1
	}

	t := e.newTerm(s, project, queue, key, rev, value, withCallback)
	if err := s.addTerm(t); err != nil {
		t.cancel(err)
		return abandon(err)
	}
	e.wg.Go(func() { t.watch(watchFrom) })
	t.log.Info("leadership started")
	ev := t.event(event.TermStarted)
	ev.At = t.started
	e.cfg.Events.Emit(ev)
	return t, nil
}

// newTerm is the term of a campaign that won: key at revision rev (the token), on session s.
// withCallback marks a term that Run's leader callback will hold.
func (e *Elector) newTerm(s *session, project, queue, key string, rev int64, value string, withCallback bool) *Term {
	tctx, tcancel := context.WithCancelCause(s.ctx)
	t := &Term{
		elector: e,
		session: s,
		project: project,
		queue:   queue,
		key:     key,
		token:   rev,
		value:   value,
		started: e.cfg.Clock.Now(),
		ctx:     tctx,
		cancel:  tcancel,
		log: e.log.With(zap.String("project", project), zap.String("queue", queue),
			zap.String("server_id", value), zap.Int64("token", rev), zap.String("lease", leaseHex(s.id))),
	}
	t.claims.Store(1)
	if withCallback {
		// Set before the term is registered with the session: a loss from then on waits for the callback.
		t.callbackDone = make(chan struct{})
		t.claims.Store(2)
	}
	return t
}

// entered is where a campaign's key stands in line, as read in the transaction that put it.
type entered struct {
	rev         int64  // the key's create revision: the term's fencing token
	header      int64  // the revision of the transaction
	predecessor string // the youngest older candidate's key; empty when ours leads
	predRev     int64  // its create revision
}

// enter puts our candidate key and, in the same transaction, reads the two youngest candidates: ours
// and the one before it. One request instead of a put and two linearizable reads: at start-up a
// process campaigns for thousands of queues at once, and every linearizable read queues in etcd
// ahead of the lease keepalives (a leader answers a keepalive only after a read-index round and once
// its apply loop caught up), so reads saved here are keepalives answered in time. A key left over
// from an earlier campaign of the same session is deleted first, so that every term gets a fresh
// fencing token.
func (e *Elector) enter(ctx context.Context, s *session, prefix, key, value string) (entered, error) {
	for {
		resp, err := inSlot(ctx, e, func() (*clientv3.TxnResponse, error) {
			return e.client.Txn(ctx).
				If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
				Then(clientv3.OpPut(key, value, clientv3.WithLease(s.id)),
					clientv3.OpGet(prefix+"/", clientv3.WithPrefix(), clientv3.WithLimit(2),
						clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend))).
				Else(clientv3.OpGet(key)).
				Commit()
		})
		if err != nil {
			return entered{}, err
		}
		if resp.Succeeded {
			in := entered{rev: resp.Header.Revision, header: resp.Header.Revision}
			kvs := resp.Responses[1].GetResponseRange().Kvs
			// Our key is the youngest: created by this very transaction. Anything else is a broken
			// invariant of etcd's; treat it like a lost key rather than guess.
			if len(kvs) == 0 || string(kvs[0].Key) != key || kvs[0].CreateRevision != in.rev || kvs[0].Lease != int64(s.id) {
				return entered{}, fmt.Errorf("%w: the transaction that put our key does not read it back at revision %d", ErrKeyLost, in.rev)
			}
			if len(kvs) > 1 {
				in.predecessor, in.predRev = string(kvs[1].Key), kvs[1].CreateRevision
			}
			return in, nil
		}
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		if _, err := e.client.Txn(ctx).
			If(HeldCmp(key, kvs[0].CreateRevision)).
			Then(clientv3.OpDelete(key)).
			Commit(); err != nil {
			return entered{}, err
		}
	}
}

// errNotSent marks a campaign request that never left the process: its context ended while it waited
// for a slot.
var errNotSent = errors.New("request not sent")

// inSlot runs one campaign request once the Elector's window has room for it (at most
// Config.MaxCampaignRequests, fewer while etcd answers slowly), or returns ctx's error, marked
// errNotSent. The request's answer time adapts the window.
func inSlot[R any](ctx context.Context, e *Elector, request func() (R, error)) (R, error) {
	if err := e.slots.acquire(ctx); err != nil {
		var zero R
		return zero, fmt.Errorf("%w (%w)", err, errNotSent)
	}
	sent := e.cfg.Clock.Now()
	defer func() { e.slots.release(e.cfg.Clock.Now().Sub(sent)) }()
	return request()
}

// candidate is a candidate key and its create revision.
type candidate struct {
	key string
	rev int64
}

// waitPredecessors returns once no candidate older than rev remains, starting with the predecessor
// the campaign's own transaction read at revision seen. Each read of the line also checks that our
// own key (key) is still at rev: a restore of etcd from a backup can put it back at an older revision
// (our lease keeps it alive), where it would stand ahead of the candidates we wait for while they
// wait for it, for ever. Such a key is lost, and the campaign starts again (enter deletes it first).
func (e *Elector) waitPredecessors(ctx context.Context, prefix, key string, rev int64, predecessor candidate, seen int64) error {
	opts := []clientv3.OpOption{clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend)}
	backoff := e.cfg.RetryMin
	for {
		if predecessor.key == "" {
			resp, err := inSlot(ctx, e, func() (*clientv3.GetResponse, error) { return e.client.Get(ctx, prefix+"/", opts...) })
			if err != nil {
				return err
			}
			var ours bool
			predecessor, ours = youngestOlder(resp.Kvs, key, rev)
			if !ours {
				return fmt.Errorf("%w: our key is no longer at revision %d (deleted, or put back older by a restore of etcd)", ErrKeyLost, rev)
			}
			if predecessor.key == "" {
				return nil
			}
			seen = resp.Header.Revision
		}
		gone, err := e.waitGone(ctx, predecessor, seen)
		if err != nil {
			return err
		}
		predecessor = candidate{}
		if gone {
			backoff = e.cfg.RetryMin
			continue
		}
		// The watch broke without an answer; look again after a pause.
		if !e.sleep(ctx, clock.Jitter(e.cfg.Clock, backoff)) {
			return ctx.Err()
		}
		backoff = min(2*backoff, e.cfg.RetryMax)
	}
}

// recheckTTLs is how many TTLs a waiting candidate watches its predecessor before it reads the line
// again (waitGone).
const recheckTTLs = 3

// youngestOlder returns, from the candidates kvs (youngest first), the youngest one older than rev,
// and whether our key is among them at rev.
func youngestOlder(kvs []*mvccpb.KeyValue, key string, rev int64) (predecessor candidate, ours bool) {
	for _, kv := range kvs {
		switch {
		case string(kv.Key) == key:
			ours = kv.CreateRevision == rev
		case kv.CreateRevision < rev && predecessor.key == "":
			predecessor = candidate{string(kv.Key), kv.CreateRevision}
		}
	}
	return predecessor, ours
}

// waitGone returns true once the candidate c, which existed at revision seen, is gone, and false
// when the watch broke first. Unlike etcd's waitDeletes it watches from the current revision, not
// from the one after its read: a watch from a past revision joins etcd's "unsynced" watchers, which
// are served every 100 ms, and a graceful handover whose leader resigns within that time (it resigns
// as soon as its successor stands in line) would wait for them. What changed between the read and
// the watch's start is covered by the watch's created notice: its revision says whether anything was
// written since seen, and only then is the key read again.
//
// The watch is given up after recheckTTLs TTLs or so, and true returned so that the line is read
// again: a restore of etcd without --bump-revision makes later revisions reuse numbers the watch has
// seen, and clientv3 resumes a broken watch from the revision after its last one, so a delete at a
// reused revision never reaches it. One read per waiting candidate per recheckTTLs TTLs bounds that
// wait.
func (e *Elector) waitGone(ctx context.Context, c candidate, seen int64) (bool, error) {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	var expired atomic.Bool
	recheck := e.cfg.Clock.AfterFunc(clock.Jitter(e.cfg.Clock, recheckTTLs*e.cfg.TTL), func() { expired.Store(true); cancel() })
	defer recheck.Stop()
	for resp := range e.client.Watch(wctx, c.key, clientv3.WithFilterPut(), clientv3.WithCreatedNotify()) {
		if resp.Err() != nil {
			break
		}
		if resp.Created {
			if resp.Header.Revision <= seen {
				continue
			}
			// Gone, or replaced by a younger key of the same session (no longer our predecessor).
			g, err := inSlot(ctx, e, func() (*clientv3.GetResponse, error) { return e.client.Get(ctx, c.key) })
			if err != nil {
				return false, err
			}
			if len(g.Kvs) == 0 || g.Kvs[0].CreateRevision != c.rev {
				return true, nil
			}
			continue
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return true, nil
			}
		}
	}
	if expired.Load() && ctx.Err() == nil {
		return true, nil // look again
	}
	return false, ctx.Err()
}

// deleteKey removes our candidate key after a failed campaign, bounded by ResignTimeout and not by
// the campaign's (possibly cancelled) context. A lost session needs nothing: its lease is revoked.
func (e *Elector) deleteKey(ctx context.Context, s *session, key string, rev int64) {
	if s.err() != nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ResignTimeout)
	defer cancel()
	if _, err := e.client.Txn(dctx).
		If(HeldCmp(key, rev)).
		Then(clientv3.OpDelete(key)).
		Commit(); err != nil {
		e.log.Warn("election could not remove its candidate key; the lease will", zap.String("key", key), zap.Error(err))
	}
}

// deleteOwnKey removes what a failed campaign may have left at key, on the session's lease, bounded
// by ResignTimeout and not by the campaign's (possibly cancelled) context. The campaign's answer was
// lost, so the key's create revision is read first and the delete compares it (HeldCmp): a delete
// that compared only the lease, held in flight past ResignTimeout and delivered after the session's
// next campaign put the key again, would remove that newer key and let etcd elect a successor while
// this process leads (issue #42). The read happens before this campaign returns and so before any
// later campaign of the key can start: the revision it sees is never a later campaign's. A delete
// whose answer is lost is safe to send again, and harmless whenever it lands.
func (e *Elector) deleteOwnKey(ctx context.Context, s *session, key string) {
	if s.err() != nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ResignTimeout)
	defer cancel()
	resp, err := e.client.Get(dctx, key)
	if err == nil && (len(resp.Kvs) == 0 || resp.Kvs[0].Lease != int64(s.id)) {
		return
	}
	if err == nil {
		_, err = e.client.Txn(dctx).
			If(HeldCmp(key, resp.Kvs[0].CreateRevision)).
			Then(clientv3.OpDelete(key)).
			Commit()
	}
	if err != nil {
		e.log.Warn("election could not remove a candidate key of a failed campaign; the lease will", zap.String("key", key), zap.Error(err))
	}
}

// campaignErr prefers the reason the campaign was cut short (session lost, ctx ended) over the
// symptom the etcd call reported.
func campaignErr(cctx context.Context, prefix string, err error) error {
	if cause := context.Cause(cctx); cause != nil && !errors.Is(err, cause) {
		if errors.Is(cause, ErrSessionLost) || errors.Is(cause, ErrClosed) {
			return fmt.Errorf("election: campaign %s: %w", prefix, cause)
		}
		return cause
	}
	return fmt.Errorf("election: campaign %s: %w", prefix, err)
}

// Close ends every term still alive with ErrClosed, revokes the session lease (removing every
// candidate key of this process at once) once the leader callbacks of those terms have returned or
// the lease's local deadline has come, and waits for all goroutines of the Elector, or for ctx. It
// stops the revoke retries of sessions lost earlier. Callers that want a fast handover resign their
// terms first (Run does when its context ends).
func (e *Elector) Close(ctx context.Context) error {
	e.endLife()
	e.mu.Lock()
	e.closed = true
	cur := e.current
	stops := e.stops
	e.stops = map[*int]context.CancelFunc{}
	e.mu.Unlock()
	for _, stop := range stops {
		stop()
	}
	if cur != nil {
		cur.lose(ErrClosed)
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("election: close: %w", ctx.Err())
	}
}

// bind returns a context that also ends when Close is called, for the Elector's own goroutines that
// run on a caller's context (observers).
func (e *Elector) bind(ctx context.Context) (context.Context, func(), error) {
	cctx, cancel := context.WithCancel(ctx)
	id := new(int)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		cancel()
		return nil, nil, ErrClosed
	}
	e.stops[id] = cancel
	return cctx, func() {
		cancel()
		e.mu.Lock()
		delete(e.stops, id)
		e.mu.Unlock()
	}, nil
}

// sleep waits d on the configured clock; false if ctx ended first.
func (e *Elector) sleep(ctx context.Context, d time.Duration) bool {
	return clock.Sleep(ctx, e.cfg.Clock, d)
}

func leaseHex(id clientv3.LeaseID) string { return fmt.Sprintf("%016x", int64(id)) }

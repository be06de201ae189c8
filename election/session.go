package election

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/event"
)

// leaser is the part of clientv3.Lease a session uses; it is small so the watchdog arithmetic can be
// unit-tested exactly with a scripted lease and a fake clock.
type leaser interface {
	Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error)
	KeepAliveOnce(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error)
	Revoke(ctx context.Context, id clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error)
}

var _ leaser = clientv3.Lease(nil)

// session is one etcd lease shared by every campaign of a process. It keeps the lease alive itself
// (instead of clientv3.Lease.KeepAlive) because it must know when each keepalive was sent: the local
// deadline is that send time plus the granted TTL, a lower bound of the server's expiry. etcd's own
// Session.Done fires only after the client thinks the TTL has passed, which is later than the
// server's expiry, so a leader relying on it could overlap with its successor.
type session struct {
	cfg    Config
	leases leaser
	id     clientv3.LeaseID
	log    *zap.Logger

	// ctx is cancelled, with the loss as its cause, when the session is lost or closed. Terms derive
	// from it, so nothing that holds a term can outlive the lease.
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}   // closed when both goroutines have returned and the lease was revoked
	life   context.Context // the Elector's: ends with Close, which stops retrying a failed revoke

	extended chan struct{} // wakes the watchdog after the deadline moved

	mu       sync.Mutex
	deadline time.Time // time before the last acknowledged keepalive was sent + granted TTL
	cause    error     // why the session ended; nil while alive
	terms    map[*Term]struct{}
	// held are the terms whose Run callback has not returned, live or ended (a resigned term's drains
	// for up to ResignTimeout): the revoke of a lost session waits for them.
	held map[*Term]struct{}
}

// grantSession grants a lease and starts its keepalive loop and watchdog. The session lives until it
// is lost or closed; its goroutines run under parent's values but not its cancellation (a campaign
// that ends must not end a session other campaigns share). wg tracks the goroutines for the owner,
// and life is the owner's lifetime: it stops the retries of a revoke after the session ended.
func grantSession(ctx context.Context, leases leaser, cfg Config, wg *sync.WaitGroup, life context.Context) (*session, error) {
	sent := cfg.Clock.Now()
	// A lease granted after TTL - SafetyMargin would be past its deadline on arrival: give up sooner
	// (an etcd that just lost its raft leader can otherwise hold the call for its request timeout).
	gctx, cancel := context.WithTimeout(ctx, cfg.TTL-cfg.SafetyMargin)
	resp, err := leases.Grant(gctx, int64(cfg.TTL/time.Second))
	cancel()
	if err != nil {
		return nil, err
	}
	s := &session{
		cfg:      cfg,
		leases:   leases,
		id:       resp.ID,
		log:      cfg.Logger.With(zap.String("lease", leaseHex(resp.ID))),
		done:     make(chan struct{}),
		life:     life,
		extended: make(chan struct{}, 1),
		deadline: sent.Add(time.Duration(resp.TTL) * time.Second),
		terms:    make(map[*Term]struct{}),
		held:     make(map[*Term]struct{}),
	}
	s.ctx, s.cancel = context.WithCancelCause(context.WithoutCancel(ctx))
	s.log.Info("election session granted", zap.Int64("ttl_seconds", resp.TTL), zap.Time("deadline", s.deadline))

	var loops sync.WaitGroup
	loops.Go(s.keepAliveLoop)
	loops.Go(s.watchdog)
	wg.Go(func() {
		loops.Wait()
		s.awaitCallbacks()
		s.revoke()
		close(s.done)
	})
	return s, nil
}

// validUntil is the instant at which every term of the session must have ended.
func (s *session) validUntil() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline.Add(-s.cfg.SafetyMargin)
}

// err returns nil while the session can be trusted, otherwise why not. It is checked synchronously
// before fenced actions, so a process resumed after a pause does not act before its watchdog runs.
func (s *session) err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.errLocked()
}

func (s *session) errLocked() error {
	if s.cause != nil {
		return s.cause
	}
	if !s.cfg.Clock.Now().Before(s.deadline.Add(-s.cfg.SafetyMargin)) {
		return ErrLeaseDeadline
	}
	return nil
}

// keepAlivesInFlight bounds the keepalives waiting for an answer at once.
const keepAlivesInFlight = 3

// keepAliveLoop sends a keepalive every KeepAliveInterval, and sooner as the deadline nears without
// an answer. A keepalive still unanswered when the next is due is not given up: on a loaded etcd (a
// burst of campaigns queues ahead of every keepalive, since a leader answers one only after a
// read-index round and once its apply loop caught up) an answer that takes longer than the interval
// still moves the deadline, from its own send time. The next one goes out beside it, so a call stuck
// on a dead connection does not hold the session either; at most keepAlivesInFlight are outstanding,
// all ended with the session.
func (s *session) keepAliveLoop() {
	var calls sync.WaitGroup
	defer calls.Wait()
	slots := make(chan struct{}, keepAlivesInFlight)
	timer := s.cfg.Clock.NewTimer(s.untilNextKeepAlive(s.cfg.Clock.Now()))
	defer timer.Stop()
	retry := s.cfg.RetryMin
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-timer.C():
		}
		select {
		case slots <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		sent := s.cfg.Clock.Now()
		answered := make(chan bool, 1)
		calls.Go(func() {
			defer func() { <-slots }()
			answered <- s.keepAliveOnce(sent)
		})
		timer.Reset(s.untilNextKeepAlive(sent))
		select {
		case <-s.ctx.Done():
			return
		case ok := <-answered:
			if ok {
				retry = s.cfg.RetryMin
				continue
			}
			if s.ctx.Err() != nil {
				return
			}
			rearm(timer, min(clock.Jitter(s.cfg.Clock, retry), s.untilNextKeepAlive(sent)))
			retry = min(2*retry, s.cfg.KeepAliveInterval)
		case <-timer.C():
			// Due again without an answer: send the next one now and let this one answer late.
			timer.Reset(0)
		}
	}
}

// rearm resets a timer that may have fired meanwhile, dropping the stale tick.
func rearm(t clock.Timer, d time.Duration) {
	if !t.Stop() {
		select {
		case <-t.C():
		default:
		}
	}
	t.Reset(d)
}

// untilNextKeepAlive is how long after now the keepalive following one sent at sent is due: a
// KeepAliveInterval after it, paced from the send and not the answer (on a loaded machine a slow
// answer must not push every later keepalive back and eat the safety margin), but no later than
// halfway to the end of the session's validity, so that a session granted or last renewed slowly
// is renewed before it runs out.
func (s *session) untilNextKeepAlive(sent time.Time) time.Duration {
	now := s.cfg.Clock.Now()
	return max(0, min(sent.Add(s.cfg.KeepAliveInterval).Sub(now), s.validUntil().Sub(now)/2))
}

// keepAliveOnce sends one keepalive, sent at sent, and moves the deadline on success. A lease the
// server no longer knows ends the session at once; any other error is retried until the watchdog
// decides. The call lives as long as the session: an answer is worth having until then.
func (s *session) keepAliveOnce(sent time.Time) bool {
	resp, err := s.leases.KeepAliveOnce(s.ctx, s.id)
	if err == nil && resp.TTL <= 0 {
		err = rpctypes.ErrLeaseNotFound
	}
	switch {
	case err == nil:
		s.extend(sent.Add(time.Duration(resp.TTL) * time.Second))
		return true
	case errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound):
		s.lose(ErrLeaseNotFound)
	case s.ctx.Err() == nil:
		s.log.Warn("election keepalive failed; retrying until the lease deadline", zap.Error(err),
			zap.Time("valid_until", s.validUntil()))
	}
	return false
}

func (s *session) extend(deadline time.Time) {
	s.mu.Lock()
	if s.cause == nil && deadline.After(s.deadline) {
		s.deadline = deadline
	}
	s.mu.Unlock()
	select {
	case s.extended <- struct{}{}:
	default:
	}
}

// watchdog ends the session at (deadline - SafetyMargin) unless a keepalive moved the deadline.
func (s *session) watchdog() {
	timer := s.cfg.Clock.NewTimer(s.validUntil().Sub(s.cfg.Clock.Now()))
	defer timer.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-s.extended:
			timer.Reset(s.validUntil().Sub(s.cfg.Clock.Now()))
		case <-timer.C():
			if left := s.validUntil().Sub(s.cfg.Clock.Now()); left > 0 {
				timer.Reset(left)
				continue
			}
			s.lose(ErrLeaseDeadline)
			return
		}
	}
}

// lose ends every term of the session, each recording its end before its context is cancelled, then
// cancels the session. Later calls do nothing.
func (s *session) lose(cause error) {
	s.mu.Lock()
	if s.cause != nil {
		s.mu.Unlock()
		return
	}
	s.cause = cause
	terms := s.terms
	s.terms = nil
	s.mu.Unlock()
	for t := range terms {
		t.end(cause)
	}
	s.cancel(cause)
	if errors.Is(cause, ErrClosed) {
		s.log.Info("election session closed", zap.Int("terms_ended", len(terms)))
		return
	}
	s.log.Warn("election session lost", zap.Error(cause), zap.Int("terms_ended", len(terms)))
	s.cfg.Events.Emit(event.Event{Kind: event.SessionLost, At: s.cfg.Clock.Now(), Err: cause.Error()})
}

// awaitCallbacks waits for the leader callbacks still running on the session's terms, until the
// local lease deadline at the latest: those of the terms the loss ended, and those of terms that
// ended before it and still drain (a resign waits up to ResignTimeout for its callback before it
// deletes the key; a revoke meanwhile would delete it sooner). That deadline is a lower bound of the
// server's expiry: until then no successor can win unless this process revokes the lease, so the
// margin before it belongs to the old leader finishing its in-flight calls (their terms ended
// SafetyMargin before the deadline). Terms from a bare Campaign have no callback and delay nothing; a
// lease etcd no longer knows is not waited for either, since a successor may already lead.
func (s *session) awaitCallbacks() {
	s.mu.Lock()
	deadline, cause := s.deadline, s.cause
	held := make([]*Term, 0, len(s.held))
	for t := range s.held {
		held = append(held, t)
	}
	s.mu.Unlock()
	if errors.Is(cause, ErrLeaseNotFound) {
		return
	}
	var running []*Term
	for _, t := range held {
		select {
		case <-t.callbackDone:
		default:
			running = append(running, t)
		}
	}
	if len(running) == 0 {
		return
	}
	timer := s.cfg.Clock.NewTimer(deadline.Sub(s.cfg.Clock.Now()))
	defer timer.Stop()
	for i, t := range running {
		select {
		case <-t.callbackDone:
		case <-timer.C():
			s.log.Warn("leader callbacks still running at the local lease deadline; revoking the lease anyway",
				zap.Int("callbacks_running", len(running)-i), zap.Time("deadline", deadline))
			return
		}
	}
}

// revokeBackoffMax caps the pause between revoke attempts. An abandoned lease keeps every queue it
// held from its successor, and a revoke is one small request per lost session: retrying every second
// bounds the lingering to about a second after etcd answers again.
const revokeBackoffMax = time.Second

// revoke deletes the lease and with it every key of the session, so that successors need not wait
// for the server-side expiry. A failed attempt (etcd unreachable, or without a raft leader) is retried
// with jittered backoff while the lease may still live on the server and the Elector is open: an etcd
// that elects a new raft leader extends every lease by its TTL, so a key left to expire can outlive
// the outage by a whole TTL. Each attempt is bounded by ResignTimeout.
func (s *session) revoke() {
	s.mu.Lock()
	cause, deadline := s.cause, s.deadline
	s.mu.Unlock()
	if errors.Is(cause, ErrLeaseNotFound) {
		return
	}
	// The server expires the lease at about the local deadline unless a raft leader is elected
	// meanwhile, which extends every lease to its TTL plus the election timeout (1s by default) from
	// its promotion. Two TTLs past the deadline cover a promotion up to about a TTL after it.
	until := deadline.Add(2 * s.cfg.TTL)
	// The first attempt goes out even when the Elector is closing (Close revokes its own session);
	// the retries stop with Close.
	first := context.WithoutCancel(s.ctx)
	retries, cancel := context.WithCancel(first)
	defer cancel()
	defer context.AfterFunc(s.life, cancel)()

	backoff := s.cfg.RetryMin
	for attempt := 1; ; attempt++ {
		ctx := retries
		if attempt == 1 {
			ctx = first
		}
		err := s.revokeOnce(ctx)
		switch {
		case err == nil && attempt > 1:
			s.log.Info("election lease revoked after retries", zap.Int("attempts", attempt))
			return
		case err == nil:
			return
		case attempt == 1:
			s.log.Info("election lease revoke failed; retrying while the lease may live", zap.Error(err),
				zap.Time("until", until))
		}
		wait := clock.Jitter(s.cfg.Clock, backoff)
		if retries.Err() != nil || s.cfg.Clock.Now().Add(wait).After(until) || !clock.Sleep(retries, s.cfg.Clock, wait) {
			s.log.Warn("election lease revoke given up; the server expires it after the TTL", zap.Error(err),
				zap.Int("attempts", attempt), zap.Bool("elector_closed", retries.Err() != nil))
			return
		}
		backoff = min(2*backoff, s.cfg.RetryMax, revokeBackoffMax)
	}
}

// revokeOnce sends one revoke; a lease the server no longer knows counts as revoked.
func (s *session) revokeOnce(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ResignTimeout)
	defer cancel()
	_, err := s.leases.Revoke(ctx, s.id)
	if err != nil && (errors.Is(err, rpctypes.ErrLeaseNotFound) || errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound)) {
		return nil
	}
	return err
}

func (s *session) addTerm(t *Term) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.errLocked(); err != nil {
		return err
	}
	s.terms[t] = struct{}{}
	if t.callbackDone != nil {
		s.held[t] = struct{}{}
	}
	return nil
}

// callbackReturned forgets t's callback, which has returned: the revoke no longer waits for it.
func (s *session) callbackReturned(t *Term) {
	s.mu.Lock()
	delete(s.held, t)
	s.mu.Unlock()
}

func (s *session) removeTerm(t *Term) {
	s.mu.Lock()
	delete(s.terms, t)
	s.mu.Unlock()
}

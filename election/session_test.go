package election

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
)

// scriptedLease answers like etcd's lease API, each keepalive by a function the test sets. It
// stands in only for the watchdog arithmetic; the integration tests run the same code on real etcd.
type scriptedLease struct {
	mu        sync.Mutex
	keepAlive func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error)
	revoke    func() error // nil: every revoke succeeds
	granting  func()       // nil: a grant is answered at once
	calls     chan struct{}
	revoked   chan struct{} // one value per revoke attempt
}

func newScriptedLease() *scriptedLease {
	return &scriptedLease{calls: make(chan struct{}, 100), revoked: make(chan struct{}, 100)}
}

func (l *scriptedLease) setRevoke(f func() error) {
	l.mu.Lock()
	l.revoke = f
	l.mu.Unlock()
}

func (l *scriptedLease) set(f func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error)) {
	l.mu.Lock()
	l.keepAlive = f
	l.mu.Unlock()
}

func (l *scriptedLease) Grant(_ context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	if l.granting != nil {
		l.granting()
	}
	return &clientv3.LeaseGrantResponse{ID: 42, TTL: ttl}, nil
}

func (l *scriptedLease) KeepAliveOnce(ctx context.Context, _ clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	l.mu.Lock()
	f := l.keepAlive
	l.mu.Unlock()
	l.calls <- struct{}{}
	return f(ctx)
}

func (l *scriptedLease) Revoke(context.Context, clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	l.mu.Lock()
	f := l.revoke
	l.mu.Unlock()
	l.revoked <- struct{}{}
	if f != nil {
		if err := f(); err != nil {
			return nil, err
		}
	}
	return &clientv3.LeaseRevokeResponse{}, nil
}

func hang(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

type sessionFixture struct {
	clock   *clock.Fake
	lease   *scriptedLease
	elector *Elector
	session *session
	term    *Term
	wg      sync.WaitGroup
	endLife context.CancelFunc // Close's part: stops revoke retries
}

// newSessionFixture grants a 10 s session on a fake clock at t0 (so it is valid until t0+7.5s) with
// one registered term, and waits until the keepalive loop and the watchdog have armed their timers.
// With withCallback the term is held by a leader callback, as Run's terms are; the test closes
// term.callbackDone when the callback returns.
func newSessionFixture(t *testing.T, withCallback bool) *sessionFixture {
	t.Helper()
	f := &sessionFixture{clock: clock.NewFake(t0), lease: newScriptedLease()}
	f.lease.set(hang)
	cfg := Config{Clock: f.clock}.withDefaults()
	f.elector = &Elector{cfg: cfg, log: cfg.Logger, campaigns: map[string]struct{}{}}
	life, endLife := context.WithCancel(t.Context())
	f.endLife = endLife
	s, err := grantSession(t.Context(), f.lease, cfg, &f.wg, life)
	if err != nil {
		t.Fatal(err)
	}
	f.session = s
	ctx, cancel := context.WithCancelCause(s.ctx)
	f.term = &Term{elector: f.elector, session: s, project: "p", queue: "q", started: t0, ctx: ctx, cancel: cancel, log: cfg.Logger}
	if withCallback {
		f.term.callbackDone = make(chan struct{})
	}
	if err := s.addTerm(f.term); err != nil {
		t.Fatal(err)
	}
	f.waitTimers(t, 2)
	t.Cleanup(func() {
		endLife()
		s.lose(ErrClosed)
		if withCallback {
			select {
			case <-f.term.callbackDone:
			default:
				close(f.term.callbackDone)
			}
		}
		f.wg.Wait()
	})
	return f
}

func (f *sessionFixture) waitTimers(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		changed := f.clock.Changed()
		if f.clock.Timers() >= n {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timeout waiting for %d armed timers, have %d", n, f.clock.Timers())
		}
	}
}

func (f *sessionFixture) waitCall(t *testing.T) {
	t.Helper()
	select {
	case <-f.lease.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("timeout waiting for a keepalive call")
	}
}

func waitDone(t *testing.T, done <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatalf("timeout waiting for %s", what)
	}
}

func TestWatchdogEndsTermsAtDeadlineMinusMargin(t *testing.T) {
	f := newSessionFixture(t, false)
	// The first keepalive (at TTL/3) hangs, as over a partitioned connection.
	f.clock.Advance(10 * time.Second / 3)
	f.waitCall(t)

	f.clock.Advance(7500*time.Millisecond - 10*time.Second/3 - time.Nanosecond)
	if err := f.term.Check(); err != nil {
		t.Fatalf("term must still be valid 1ns before the margin: %v", err)
	}
	f.clock.Advance(time.Nanosecond)
	// Check is synchronous: it refuses at the deadline even before the watchdog goroutine runs.
	if err := f.term.Check(); !errors.Is(err, ErrNotLeader) || !errors.Is(err, ErrLeaseDeadline) {
		t.Fatalf("Check at the margin = %v, want ErrNotLeader wrapping ErrLeaseDeadline", err)
	}
	waitDone(t, f.term.Done(), "the term to end")
	if cause := f.term.Err(); !errors.Is(cause, ErrLeaseDeadline) || !errors.Is(cause, ErrSessionLost) {
		t.Fatalf("cause = %v, want ErrLeaseDeadline (an ErrSessionLost)", cause)
	}
	if ended, ok := f.term.Ended(); !ok || !ended.Equal(t0.Add(7500*time.Millisecond)) {
		t.Fatalf("term ended at %v, want exactly t0+7.5s", ended)
	}
	waitDone(t, f.session.done, "the session goroutines to stop and revoke")
	select {
	case <-f.lease.revoked:
	default:
		t.Fatal("a lost session must revoke its lease so successors need not wait for the expiry")
	}
}

func TestKeepAliveMovesDeadlineFromSendTime(t *testing.T) {
	f := newSessionFixture(t, false)
	// The keepalive takes 2 s to be answered: the deadline counts from when it was sent.
	f.lease.set(func(context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		f.clock.Advance(2 * time.Second)
		return &clientv3.LeaseKeepAliveResponse{TTL: 10}, nil
	})
	sent := t0.Add(10 * time.Second / 3)
	f.clock.Advance(10 * time.Second / 3)
	f.waitCall(t)
	f.lease.set(hang)
	want := sent.Add(10*time.Second - 2500*time.Millisecond)
	deadline := time.After(5 * time.Second)
	for !f.term.ValidUntil().Equal(want) {
		select {
		case <-f.clock.Changed():
		case <-deadline:
			t.Fatalf("ValidUntil = %v, want %v", f.term.ValidUntil(), want)
		}
	}
	// The old deadline (t0+7.5s) passes without a loss; the new one ends the term.
	f.waitTimers(t, 2)
	f.clock.Advance(want.Sub(f.clock.Now()) - time.Nanosecond)
	if err := f.term.Check(); err != nil {
		t.Fatalf("term must be valid until the moved deadline: %v", err)
	}
	f.clock.Advance(time.Nanosecond)
	waitDone(t, f.term.Done(), "the term to end at the moved deadline")
	if ended, _ := f.term.Ended(); !ended.Equal(want) {
		t.Fatalf("term ended at %v, want %v", ended, want)
	}
}

// startSession grants a session on lease with cfg, ended and waited for when the test ends.
func startSession(t *testing.T, lease *scriptedLease, cfg Config) *session {
	t.Helper()
	var wg sync.WaitGroup
	life, endLife := context.WithCancel(t.Context())
	s, err := grantSession(t.Context(), lease, cfg, &wg, life)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { endLife(); s.lose(ErrClosed); wg.Wait() })
	return s
}

// A keepalive answered after the next one was due still renews the session, from its own send time:
// on an etcd busy with a burst of campaigns an answer can take longer than KeepAliveInterval, and
// giving up on it at the interval would lose a session the server kept.
func TestLateKeepAliveAnswerStillCounts(t *testing.T) {
	c := clock.NewFake(t0)
	lease := newScriptedLease()
	answered := make(chan struct{})
	lease.set(func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		// Answered in real time well past the (real-time) interval of 50ms, unless the call was given up.
		select {
		case <-time.After(300 * time.Millisecond):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		close(answered)
		return &clientv3.LeaseKeepAliveResponse{TTL: 10}, nil
	})
	cfg := Config{Clock: c, KeepAliveInterval: 50 * time.Millisecond, RetryMin: 10 * time.Millisecond}.withDefaults()
	s := startSession(t, lease, cfg)
	first := s.validUntil()
	(&sessionFixture{clock: c}).waitTimers(t, 2) // the keepalive loop and the watchdog are armed
	c.Advance(50 * time.Millisecond)             // the first keepalive is due
	waitDone(t, answered, "the slow keepalive to be answered")
	want := t0.Add(50*time.Millisecond + 10*time.Second - cfg.SafetyMargin)
	deadline := time.After(5 * time.Second)
	for !s.validUntil().Equal(want) {
		select {
		case <-time.After(time.Millisecond):
		case <-deadline:
			t.Fatalf("validUntil = %v (granted: %v), want %v: the late answer was given up", s.validUntil(), first, want)
		}
	}
}

// A session whose grant was answered late (its deadline counts from the request) is renewed before
// it runs out, not a whole KeepAliveInterval after the grant.
func TestSlowGrantIsRenewedBeforeItRunsOut(t *testing.T) {
	c := clock.NewFake(t0)
	lease := newScriptedLease()
	lease.granting = func() { c.Advance(7 * time.Second) } // 0.5s of validity left on arrival
	lease.set(func(context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return &clientv3.LeaseKeepAliveResponse{TTL: 10}, nil
	})
	cfg := Config{Clock: c}.withDefaults()
	s := startSession(t, lease, cfg)
	if got := s.validUntil(); !got.Equal(t0.Add(7500 * time.Millisecond)) {
		t.Fatalf("validUntil after the slow grant = %v, want t0+7.5s", got)
	}
	// Step towards the end of the validity; a keepalive must go out and renew before it.
	for s.validUntil().Equal(t0.Add(7500 * time.Millisecond)) {
		if !c.Now().Before(t0.Add(7500 * time.Millisecond)) {
			t.Fatalf("the session ran out at %v without a keepalive", c.Now())
		}
		select {
		case <-lease.calls:
		case <-c.Changed():
		case <-time.After(20 * time.Millisecond):
		}
		c.Advance(25 * time.Millisecond)
	}
	if err := s.err(); err != nil {
		t.Fatalf("session lost: %v", err)
	}
}

func TestLeaseNotFoundEndsSessionAtOnce(t *testing.T) {
	f := newSessionFixture(t, false)
	f.lease.set(func(context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return nil, rpctypes.ErrLeaseNotFound
	})
	f.clock.Advance(10 * time.Second / 3)
	waitDone(t, f.term.Done(), "the term to end")
	if !errors.Is(f.term.Err(), ErrLeaseNotFound) {
		t.Fatalf("cause = %v, want ErrLeaseNotFound", f.term.Err())
	}
	if ended, _ := f.term.Ended(); !ended.Equal(t0.Add(10 * time.Second / 3)) {
		t.Fatalf("term ended at %v, want at the failed keepalive", ended)
	}
}

func TestTransientKeepAliveErrorsAreRetried(t *testing.T) {
	f := newSessionFixture(t, false)
	var mu sync.Mutex
	failures := 0
	f.lease.set(func(context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		mu.Lock()
		defer mu.Unlock()
		if failures < 3 {
			failures++
			return nil, errors.New("connection refused")
		}
		return &clientv3.LeaseKeepAliveResponse{TTL: 10}, nil
	})
	// Fake time moves in small steps, each after the loop has had a chance to act on the last answer,
	// until the deadline moves: the retries (100, 200, 400 ms, jittered) must renew the session well
	// before it would end at t0+7.5s.
	f.clock.Advance(10 * time.Second / 3)
	for !f.term.ValidUntil().After(t0.Add(7500 * time.Millisecond)) {
		if f.clock.Now().After(t0.Add(7 * time.Second)) {
			t.Fatalf("deadline never moved after retries; ValidUntil = %v", f.term.ValidUntil())
		}
		select {
		case <-f.lease.calls:
		case <-f.clock.Changed():
		case <-time.After(20 * time.Millisecond):
		}
		f.clock.Advance(50 * time.Millisecond)
	}
	mu.Lock()
	if failures != 3 {
		t.Errorf("%d failed keepalives before the renewal, want 3", failures)
	}
	mu.Unlock()
	if err := f.term.Check(); err != nil {
		t.Fatalf("transient errors must not end the term: %v", err)
	}
}

func TestLoseEndsEveryTermBeforeCancellingTheSession(t *testing.T) {
	f := newSessionFixture(t, false)
	f.session.lose(ErrClosed)
	if ended, ok := f.term.Ended(); !ok || !ended.Equal(t0) {
		t.Fatalf("term end must be recorded synchronously, got %v %v", ended, ok)
	}
	if !errors.Is(f.term.Err(), ErrClosed) {
		t.Fatalf("cause = %v, want ErrClosed", f.term.Err())
	}
	if err := f.session.addTerm(&Term{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("a lost session must refuse new terms, got %v", err)
	}
}

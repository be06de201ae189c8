package election

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
)

func (f *sessionFixture) revokes() int { return len(f.lease.revoked) }

// loseAtMargin lets the first keepalive hang and advances to t0+7.5s, where the watchdog ends the
// term, then waits until the lost session's goroutine has armed n timers.
func (f *sessionFixture) loseAtMargin(t *testing.T, n int) {
	t.Helper()
	f.clock.Advance(10 * time.Second / 3)
	f.waitCall(t)
	f.clock.Advance(7500*time.Millisecond - 10*time.Second/3)
	waitDone(t, f.term.Done(), "the term to end")
	if !errors.Is(f.term.Err(), ErrLeaseDeadline) {
		t.Fatalf("cause = %v, want ErrLeaseDeadline", f.term.Err())
	}
	f.waitTimers(t, n)
}

// The margin between the watchdog's loss and the server's expiry belongs to the old leader: the lease
// is revoked only once its callback has returned.
func TestLostSessionRevokesAfterTheLeaderCallbackReturned(t *testing.T) {
	f := newSessionFixture(t, true)
	f.loseAtMargin(t, 1) // the loops are gone; the wait for the callback armed its deadline timer
	if n := f.revokes(); n != 0 {
		t.Fatalf("lease revoked %d times while the leader callback was still running", n)
	}
	close(f.term.callbackDone)
	waitDone(t, f.session.done, "the revoke after the callback returned")
	if n := f.revokes(); n != 1 {
		t.Fatalf("revokes = %d, want 1", n)
	}
	if now := f.clock.Now(); !now.Equal(t0.Add(7500 * time.Millisecond)) {
		t.Fatalf("revoked at %v, want as soon as the callback returned (t0+7.5s)", now)
	}
}

// A term that ended before the loss (a resign, whose callback drains for up to ResignTimeout before
// the key goes) holds the revoke up just the same: the revoke would delete its key while the old
// leader still acts.
func TestLostSessionWaitsForTheCallbackOfATermThatEndedBefore(t *testing.T) {
	f := newSessionFixture(t, true)
	f.term.end(ErrResigned) // the term resigns; its callback still drains
	f.clock.Advance(10 * time.Second / 3)
	f.waitCall(t)
	f.clock.Advance(7500*time.Millisecond - 10*time.Second/3)
	waitDone(t, f.session.ctx.Done(), "the session to be lost")
	f.waitTimers(t, 1) // the wait for the callback armed its deadline timer
	if n := f.revokes(); n != 0 {
		t.Fatalf("lease revoked %d times while the resigned term's callback was still running", n)
	}
	close(f.term.callbackDone)
	waitDone(t, f.session.done, "the revoke after the callback returned")
	if n := f.revokes(); n != 1 {
		t.Fatalf("revokes = %d, want 1", n)
	}
}

// A callback that does not return holds the revoke up to the local lease deadline only.
func TestLostSessionRevokesAtTheDeadlineWhileTheCallbackRuns(t *testing.T) {
	f := newSessionFixture(t, true)
	f.loseAtMargin(t, 1)
	f.clock.Advance(2500*time.Millisecond - time.Nanosecond)
	select {
	case <-f.session.done:
		t.Fatal("lease revoked before the local deadline while the callback was still running")
	case <-time.After(50 * time.Millisecond):
	}
	f.clock.Advance(time.Nanosecond)
	waitDone(t, f.session.done, "the revoke at the local deadline")
	if n := f.revokes(); n != 1 {
		t.Fatalf("revokes = %d, want 1", n)
	}
}

// A revoke that fails (etcd without a leader, or unreachable) is retried until it succeeds.
func TestFailedRevokeIsRetried(t *testing.T) {
	f := newSessionFixture(t, false)
	var failures atomic.Int32
	f.lease.setRevoke(func() error {
		if failures.Add(1) <= 3 {
			return errors.New("etcdserver: no leader")
		}
		return nil
	})
	f.loseAtMargin(t, 1) // the first attempt failed and the retry timer is armed
	for {
		changed := f.clock.Changed()
		if f.clock.Timers() > 0 {
			f.clock.Advance(revokeBackoffMax)
			continue
		}
		select {
		case <-f.session.done:
			if got := f.revokes(); got != 4 {
				t.Fatalf("revoke attempts = %d, want 4 (3 failures, then success)", got)
			}
			return
		case <-changed:
		case <-time.After(5 * time.Second):
			t.Fatalf("revoke not retried to success; attempts = %d", f.revokes())
		}
	}
}

// Retries stop when the lease must have expired on the server anyway (two TTLs past the local
// deadline), and when the Elector closes.
func TestRevokeRetriesAreBounded(t *testing.T) {
	t.Run("by the lease's lifetime", func(t *testing.T) {
		f := newSessionFixture(t, false)
		f.lease.setRevoke(func() error { return errors.New("connection refused") })
		f.loseAtMargin(t, 1)
		until := t0.Add(10*time.Second + 2*10*time.Second)
		for {
			changed := f.clock.Changed()
			if f.clock.Timers() > 0 {
				f.clock.Advance(revokeBackoffMax)
				continue
			}
			select {
			case <-f.session.done:
				if now := f.clock.Now(); now.After(until) {
					t.Fatalf("retries went on until %v, past %v", now, until)
				}
				if now := f.clock.Now(); now.Before(until.Add(-2 * revokeBackoffMax)) {
					t.Fatalf("retries stopped at %v, well before %v", now, until)
				}
				// Backoff doubles from 100ms to 1s: about 25 attempts in 22.5s.
				if n := f.revokes(); n < 10 || n > 60 {
					t.Fatalf("revoke attempts = %d, want about 25", n)
				}
				t.Logf("%d revoke attempts until %v", f.revokes(), f.clock.Now().Sub(t0))
				return
			case <-changed:
			case <-time.After(5 * time.Second):
				t.Fatalf("revoke retries did not stop; attempts = %d at %v", f.revokes(), f.clock.Now())
			}
		}
	})
	t.Run("by Close", func(t *testing.T) {
		f := newSessionFixture(t, false)
		f.lease.setRevoke(func() error { return errors.New("connection refused") })
		f.loseAtMargin(t, 1)
		f.endLife()
		waitDone(t, f.session.done, "the revoke retries to stop with the Elector")
		if n := f.revokes(); n != 1 {
			t.Fatalf("revoke attempts = %d, want 1", n)
		}
	})
}

// A lease etcd no longer knows needs no revoke and no wait.
func TestLeaseNotFoundIsNotRevoked(t *testing.T) {
	f := newSessionFixture(t, true)
	f.lease.set(func(ctx context.Context) (*clientv3.LeaseKeepAliveResponse, error) {
		return nil, rpctypes.ErrLeaseNotFound
	})
	f.clock.Advance(10 * time.Second / 3)
	waitDone(t, f.session.done, "the session to end")
	if n := f.revokes(); n != 0 {
		t.Fatalf("revokes = %d for a lease etcd no longer knows", n)
	}
}

func TestBackoff(t *testing.T) {
	b := newBackoff(clock.Real(), 100*time.Millisecond, time.Second)
	for _, want := range []time.Duration{100, 200, 400, 800, 1000, 1000} {
		want *= time.Millisecond
		if d := b.next(); d < want/2 || d > want {
			t.Fatalf("next() = %v, want within [%v, %v]", d, want/2, want)
		}
	}
	b.reset()
	if d := b.next(); d > 100*time.Millisecond {
		t.Fatalf("after reset next() = %v, want at most 100ms", d)
	}
}

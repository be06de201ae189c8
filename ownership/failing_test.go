package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

func TestHoldFor(t *testing.T) {
	base, maximum := 30*time.Second, 5*time.Minute
	for _, tc := range []struct {
		terms int
		want  time.Duration
	}{{1, 30 * time.Second}, {2, time.Minute}, {3, 2 * time.Minute}, {4, 4 * time.Minute}, {5, 5 * time.Minute}, {1000, 5 * time.Minute}} {
		if got := holdFor(tc.terms, base, maximum); got != tc.want {
			t.Errorf("holdFor(%d) = %v, want %v", tc.terms, got, tc.want)
		}
	}
}

func TestNextFailing(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	since := now.Add(-3 * time.Minute)
	cause := errors.New("namespace not found")
	prev := Failing{Since: since, At: now.Add(-time.Minute), Terms: 3, ServerID: "other", Token: 5}
	for _, tc := range []struct {
		name      string
		prev      Failing
		found     bool
		wantTerms int
		wantSince time.Time
	}{
		{"none", Failing{}, false, 1, now},
		{"an earlier failed term", prev, true, 4, since},
		{"stale", Failing{Since: since, At: now.Add(-11 * time.Minute), Terms: 3, Token: 5}, true, 1, now},
		{"a later term's (superseded)", Failing{Since: since, At: now, Terms: 3, Token: 9}, true, 1, now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := nextFailing(tc.prev, tc.found, now, 10*time.Minute, newTerm(7), cause)
			if got.Terms != tc.wantTerms || !got.Since.Equal(tc.wantSince) || !got.At.Equal(now) || got.Token != 7 ||
				got.ServerID != "me" || got.Reason != cause.Error() {
				t.Fatalf("nextFailing = %+v, want %d terms since %v", got, tc.wantTerms, tc.wantSince)
			}
		})
	}
}

// memFailures is a shared record store, as etcd is for the fleet.
type memFailures struct {
	mu    sync.Mutex
	rec   Failing
	found bool
	saves int
}

func (m *memFailures) Load(context.Context, takeover.Term) (Failing, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec, m.found, nil
}

func (m *memFailures) Save(_ context.Context, _ takeover.Term, rec Failing) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rec, m.found, m.saves = rec, true, m.saves+1
	return nil
}

func (m *memFailures) Clear(context.Context, takeover.Term) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rec, m.found = Failing{}, false
	return nil
}

func (m *memFailures) get() (Failing, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rec, m.found
}

// A takeover nobody can make succeed: the term is kept for PermanentHold while the takeover is
// retried with backoff, then resigned; the next winner -- another worker, sharing the record -- keeps
// its term twice as long, and a takeover that succeeds clears the record.
func TestPermanentFailureHoldsTheTermAndTheFleetBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const hold = 10 * time.Second
		shared := &memFailures{}
		a, b := newHarness(t, false), newHarness(t, false)
		for _, h := range []*harness{a, b} {
			h.q.cfg.Failures = shared
			h.q.cfg.PermanentHold, h.q.cfg.PermanentHoldMax = hold, 4*hold
			h.f.failTakes = fmt.Errorf("namespace not found: %w", takeover.ErrPermanent)
		}
		b.clk = a.clk // one clock for the fleet
		b.q.clk = a.clk

		term, done := a.lead(7)
		if rec, ok := shared.get(); !ok || rec.Terms != 1 || rec.Token != 7 {
			t.Fatalf("record after the first failure: %+v %v", rec, ok)
		}
		a.step(hold - time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("Lead returned %v before its hold was over", err)
		default:
		}
		var attempts int
		a.f.get(func(f *fakes) { attempts = f.attempts })
		// RetryMin doubling up to the hold, jittered: 100ms, 200ms, ... within 10 s, no hot loop.
		if attempts < 4 || attempts > 12 {
			t.Fatalf("%d takeover attempts in the hold of %v", attempts, hold)
		}
		a.advance(time.Millisecond)
		if err := <-done; !errors.Is(err, takeover.ErrPermanent) {
			t.Fatalf("Lead after its hold = %v, want the permanent failure (resign)", err)
		}
		term.end(election.ErrResigned)
		a.q.SteppedDown(term, election.ErrResigned)
		if s := a.q.Snapshot(); !errors.Is(s.Permanent, takeover.ErrPermanent) {
			t.Fatalf("readiness of the worker that failed forgets it: %+v", s)
		}

		// Another worker wins: the fleet's second failed term in a row, kept twice as long.
		next, done := b.lead(9)
		if rec, _ := shared.get(); rec.Terms != 2 || rec.Token != 9 {
			t.Fatalf("record after the second failed term: %+v", rec)
		}
		b.step(2*hold - time.Millisecond)
		select {
		case err := <-done:
			t.Fatalf("the second failed term ended after %v, before its hold of %v: %v", 2*hold, 2*hold, err)
		default:
		}
		// The namespace is back: the next retry takes the dispatcher over and clears the record.
		b.f.get(func(f *fakes) { f.failTakes = nil })
		b.step(hold)
		if s := b.q.Snapshot(); !s.Open || s.Permanent != nil || s.Failing.Terms != 0 {
			t.Fatalf("after the namespace came back: %+v", s)
		}
		if _, ok := shared.get(); ok {
			t.Fatal("the shared record outlived a takeover that succeeded")
		}
		next.end(election.ErrResigned)
		<-done
	})
}

// A takeover failure that retrying may fix resigns the term at once, as before.
func TestTransientFailureInAHeldTermResigns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		h := newHarness(t, false)
		h.f.failTakes = fmt.Errorf("namespace not found: %w", takeover.ErrPermanent)
		term, done := h.lead(7)
		h.f.get(func(f *fakes) { f.failTakes = errors.New("deadline exceeded") })
		h.advance(time.Second)
		if err := <-done; err == nil || errors.Is(err, takeover.ErrPermanent) {
			t.Fatalf("Lead = %v, want the transient failure", err)
		}
		term.end(election.ErrResigned)
	})
}

// step moves the fake clock by d in steps of RetryMin, so that every timer armed on the way fires.
func (h *harness) step(d time.Duration) {
	for ; d > retryMin; d -= retryMin {
		h.advance(retryMin)
	}
	h.advance(d)
}

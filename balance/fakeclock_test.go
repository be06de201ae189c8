package balance

import (
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
)

// fakeRunner is testRunner on a fake clock that reads a time far from the wall clock's, so that any
// wait computed against the wall clock instead of the injected one is off by decades.
func fakeRunner(self string, queues []string, members ...string) (*Runner, *clock.Fake) {
	fake := clock.NewFake(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	r := testRunner(self, queues, members...)
	r.cfg.Clock, r.view.clk, r.roster.clk = fake, fake, fake
	r.started, r.view.loadedAt = fake.Now(), fake.Now()
	return r, fake
}

// A vacant queue's wait is measured on the injected clock: exactly Settle (and VacantWait more per
// rank) from the start, whatever the wall clock reads.
func TestVacantWaitOnTheInjectedClock(t *testing.T) {
	queues := queueNames(50)
	r, fake := fakeRunner("w0", queues, "w0", "w1", "w2")
	byRank := map[int]string{}
	for _, q := range queues {
		if n := r.rankOf(q); byRank[n] == "" {
			byRank[n] = q
		}
	}
	settle, vacant := r.cfg.Settle, r.cfg.VacantWait
	for n, want := range []time.Duration{settle, settle + vacant, settle + 2*vacant} {
		if got := r.vacantWait(byRank[n]); got != want {
			t.Fatalf("ranked %d: wait %v, want exactly %v", n, got, want)
		}
	}
	fake.Advance(settle)
	if got := r.vacantWait(byRank[0]); got != 0 {
		t.Fatalf("ranked first, Settle passed: wait %v, want 0", got)
	}
}

// A queue paused after a shed is woken when the pause ends by the injected clock: its timer is due
// exactly then.
func TestShedPauseOnTheInjectedClock(t *testing.T) {
	r, fake := fakeRunner("w0", []string{"q"}, "w0", "w1")
	r.view.apply("/e/p/q/1", "w1", 1, false) // w1 leads, and not above its share: w0 would not stand
	d := &idleQueues{r: r, ctx: t.Context(), cbs: map[string]election.Callbacks{}, idle: map[string]bool{"q": true},
		paused: map[string]time.Time{}, timers: map[string]clock.Timer{}}
	defer d.stop()
	pause := 2 * r.cfg.ShedInterval
	d.paused["q"] = fake.Now().Add(pause)
	d.look("q")
	due, ok := fake.NextDue()
	if !ok || !due.Equal(fake.Now().Add(pause)) {
		t.Fatalf("after a shed: next timer due %v (armed %v), want %v", due, ok, fake.Now().Add(pause))
	}
	if _, still := d.paused["q"]; !still {
		t.Fatal("the pause was dropped before it ended")
	}
}

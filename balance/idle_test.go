package balance

import (
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
)

// An idle queue that may not stand yet costs a timer, not a goroutine: look arms one timer per
// queue, due exactly when time alone may change the decision (a vacancy's turn, a pause's end), moves
// it when that changes, and arms none when only the candidates can change it.
func TestIdleLookArmsOneTimer(t *testing.T) {
	queues := queueNames(60)
	f := newFleet(t, queues...)
	f.member("w0", "", false).member("w1", "", false).member("w2", "", false)
	r := f.r
	byRank := map[int]string{}
	for _, q := range queues {
		if n := r.rankOf(q); byRank[n] == "" {
			byRank[n] = q
		}
	}
	d := &idleQueues{r: r, ctx: t.Context(), cbs: map[string]election.Callbacks{}, idle: map[string]bool{},
		paused: map[string]time.Time{}, timers: map[string]clock.Timer{}}
	defer d.stop()
	settle, vacant := r.cfg.Settle, r.cfg.VacantWait
	due := func() time.Duration {
		at, ok := f.fake.NextDue()
		if !ok {
			return -1
		}
		return at.Sub(t0)
	}
	second, third := byRank[1], byRank[2]
	d.idle[second], d.idle[third] = true, true

	d.look(third)
	if got := due(); got != settle+2*vacant || f.fake.Timers() != 1 {
		t.Fatalf("third-ranked, vacant: due %v with %d timers, want %v with one", got, f.fake.Timers(), settle+2*vacant)
	}
	// A worker ranked above it drains: it ranks second now, and its one timer moves earlier.
	f.member("w2", "", true)
	d.look(third)
	if got := due(); got != settle+vacant || f.fake.Timers() != 1 {
		t.Fatalf("third-ranked become second: due %v with %d timers, want %v with one", got, f.fake.Timers(), settle+vacant)
	}
	d.look(second)
	if f.fake.Timers() != 2 {
		t.Fatalf("a second vacant queue: %d timers, want two", f.fake.Timers())
	}
	// A leader within its share takes the queue: no time of its own can change that.
	f.line(second, "w1")
	d.look(second)
	f.fake.Advance(settle + vacant)
	if !d.idle[second] || d.running != 0 {
		t.Fatalf("behind w1 within its share: idle %v, running %d; want idle", d.idle[second], d.running)
	}
	if f.fake.Timers() != 0 {
		t.Fatalf("after both were due: %d timers armed, want none", f.fake.Timers())
	}
}

// A pause after a shed holds the queue until it ends, to the nanosecond; once ended, it is dropped and
// the queue is decided as any other.
func TestIdlePauseEnds(t *testing.T) {
	f := newFleet(t, "q")
	f.member("w0", "", false).member("w1", "", false).line("q", "w1")
	d := &idleQueues{r: f.r, ctx: t.Context(), cbs: map[string]election.Callbacks{}, idle: map[string]bool{"q": true},
		paused: map[string]time.Time{"q": t0.Add(time.Second)}, timers: map[string]clock.Timer{}}
	defer d.stop()
	f.fake.Advance(time.Second - time.Nanosecond)
	d.look("q")
	if _, ok := d.paused["q"]; !ok {
		t.Fatal("a nanosecond before the pause ends: dropped")
	}
	if at, ok := f.fake.NextDue(); !ok || !at.Equal(t0.Add(time.Second)) {
		t.Fatalf("timer due %v (%v), want at the pause's end", at, ok)
	}
	f.fake.Advance(time.Nanosecond)
	d.look("q")
	if _, ok := d.paused["q"]; ok {
		t.Fatal("at the pause's end: still paused")
	}
	if !d.idle["q"] || d.running != 0 {
		t.Fatal("behind w1 within its share, the pause over: the queue left idle")
	}
}

package balance

import (
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
)

// Shedding is paced by the injected clock: a queue held for less than Cooldown stays, then moves
// are ShedInterval apart and at most MaxMoves per MoveWindow. Four queues led by w0, w1 standing in
// line for each: w0 is over its fair share.
func TestShedIsPacedByTheClock(t *testing.T) {
	clk := clock.NewFake(time.Unix(1_700_000_000, 0))
	queues := []string{"q0", "q1", "q2", "q3"}
	v := newView("/e/p/", "w0", queues)
	v.clk = clk
	cfg := Config{Project: "p", ServerID: "w0", Queues: queues, Cooldown: 5 * time.Second, ShedInterval: 100 * time.Millisecond,
		MaxMoves: 2, MoveWindow: time.Second, Clock: clk}.WithDefaults()
	r := &Runner{cfg: cfg, view: v, records: map[string]*record{}, named: map[string][]time.Time{}}
	r.roster = newRoster(Keys{ElectionPrefix: "/e"}, "p", "w0", "", 10*time.Second, r.log, v.poke, v.wake)
	r.roster.clk = clk
	r.roster.members["w0"], r.roster.members["w1"] = member{}, member{}
	for i, q := range queues {
		v.apply("/e/p/"+q+"/1", "w0", int64(2*i+1), false)
		v.apply("/e/p/"+q+"/2", "w1", int64(2*i+2), false)
		r.setHeldLocked(q, true, clk.Now())
	}
	shed := func(q string) (string, time.Duration) {
		t.Helper()
		reason, wait := r.shouldShed(q)
		t.Logf("%v: shouldShed(%s) = %q, wait %v", clk.Now().Sub(time.Unix(1_700_000_000, 0)), q, reason, wait)
		return reason, wait
	}
	if reason, wait := shed("q0"); reason != "" || wait != cfg.Cooldown {
		t.Fatalf("within the cooldown: %q, wait %v; want none, wait %v", reason, wait, cfg.Cooldown)
	}
	clk.Advance(cfg.Cooldown)
	if reason, _ := shed("q0"); reason != ReasonShed {
		t.Fatalf("after the cooldown: %q, want %q", reason, ReasonShed)
	}
	if reason, wait := shed("q1"); reason != "" || wait != cfg.ShedInterval {
		t.Fatalf("right after a move: %q, wait %v; want none, wait %v", reason, wait, cfg.ShedInterval)
	}
	clk.Advance(cfg.ShedInterval)
	if reason, _ := shed("q1"); reason != ReasonShed {
		t.Fatalf("ShedInterval later: %q, want %q", reason, ReasonShed)
	}
	clk.Advance(cfg.ShedInterval)
	reason, wait := shed("q2")
	if want := cfg.MoveWindow - 2*cfg.ShedInterval; reason != "" || wait != want {
		t.Fatalf("a third move within the window (MaxMoves %d): %q, wait %v; want none, wait %v", cfg.MaxMoves, reason, wait, want)
	}
	clk.Advance(wait)
	if reason, _ := shed("q2"); reason != ReasonShed {
		t.Fatalf("once the window moved on: %q, want %q", reason, ReasonShed)
	}
}

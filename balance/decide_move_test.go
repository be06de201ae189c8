package balance

import (
	"slices"
	"testing"
	"time"
)

// held is a shedFacts for a queue held since t0, looked at an hour later: this worker keeps 10 queues
// with a fair share of 4 (limit ceil(1.25 × 4) = 5), others stand for the queue, Cooldown 5s.
func held(change func(*shedFacts)) shedFacts {
	f := shedFacts{now: t0.Add(time.Hour), rec: record{held: true, heldSince: t0}, keeping: 10, fair: 4,
		others: true, shedAbove: 1.25, cooldown: 5 * time.Second}
	if change != nil {
		change(&f)
	}
	return f
}

func TestDecideShed(t *testing.T) {
	drains := func(taker bool) func(*shedFacts) {
		return func(f *shedFacts) { f.draining, f.hasTaker = true, taker }
	}
	heldFor := func(d time.Duration) func(*shedFacts) { return func(f *shedFacts) { f.now = t0.Add(d) } }
	keeps := func(n, fair int, lighter bool) func(*shedFacts) {
		return func(f *shedFacts) { f.keeping, f.fair, f.lighter = n, fair, lighter }
	}
	and := func(fs ...func(*shedFacts)) func(*shedFacts) {
		return func(f *shedFacts) {
			for _, g := range fs {
				g(f)
			}
		}
	}
	shed, drain, none := moveDecision{reason: ReasonShed}, moveDecision{reason: ReasonDrain}, moveDecision{}
	later := moveDecision{lookAgain: true}
	for _, tc := range []struct {
		name string
		f    shedFacts
		want moveDecision
	}{
		{"over the limit", held(nil), shed},
		// Takeovers and drains.
		{"takeover under way", held(func(f *shedFacts) { f.rec.takeovers = 1 }), none},
		{"takeover under way, draining", held(and(drains(true), func(f *shedFacts) { f.rec.takeovers = 2 })), none},
		{"draining with a taker", held(drains(true)), drain},
		{"draining with a taker, within the cooldown", held(and(drains(true), heldFor(time.Second))), drain},
		{"draining with a taker, during a rollout", held(and(drains(true), func(f *shedFacts) { f.rollout = true })), drain},
		{"draining with a taker, below its share", held(and(drains(true), keeps(1, 4, false))), drain},
		{"draining, only it serves the queue", held(drains(false)), none},
		// Calm: nothing moves during a rollout or while a candidate's version is unknown.
		{"rollout", held(func(f *shedFacts) { f.rollout = true }), none},
		{"a candidate's record unknown", held(func(f *shedFacts) { f.unknown = true }), none},
		// The share.
		{"at the fair share", held(keeps(4, 4, true)), none},
		{"one over the fair share, within the limit", held(keeps(5, 4, true)), later},
		{"at ceil(ShedAbove × fair) = 5: not over", held(keeps(5, 4, false)), later},
		{"one over the limit", held(keeps(6, 4, false)), shed},
		{"above ShedAbove × fair (3.75) with a lighter worker in line", held(keeps(4, 3, true)), shed},
		{"above ShedAbove × fair (3.75), nobody lighter", held(keeps(4, 3, false)), later},
		{"2 queues on 2 workers, the other leads none", held(keeps(2, 1, true)), shed},
		{"25 of 100 on 5 workers: within ShedAbove, though one leads none", held(keeps(25, 20, true)), later},
		{"26 of 100 on 5 workers", held(keeps(26, 20, false)), shed},
		// Cooldown, at its edges.
		{"held just under Cooldown", held(heldFor(5*time.Second - time.Nanosecond)), moveDecision{wait: time.Nanosecond}},
		{"held exactly Cooldown", held(heldFor(5 * time.Second)), shed},
		{"just won", held(heldFor(0)), moveDecision{wait: 5 * time.Second}},
		{"no Cooldown", held(and(heldFor(0), func(f *shedFacts) { f.cooldown = 0 })), shed},
		{"nobody else stands", held(func(f *shedFacts) { f.others = false }), none},
		{"nobody else stands, within the cooldown", held(and(heldFor(time.Second), func(f *shedFacts) { f.others = false })), moveDecision{wait: 4 * time.Second}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := decideShed(tc.f); got != tc.want {
				t.Fatalf("decideShed = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPace(t *testing.T) {
	const interval, window, maxMoves = 100 * time.Millisecond, time.Second, 2
	at := func(ds ...time.Duration) []time.Time {
		ts := make([]time.Time, len(ds))
		for i, d := range ds {
			ts[i] = t0.Add(d)
		}
		return ts
	}
	for _, tc := range []struct {
		name      string
		p         pacing
		now       time.Duration
		reason    string
		wait      time.Duration
		wantMoves []time.Time
	}{
		{"the first shed", pacing{}, 0, ReasonShed, 0, at(0)},
		{"the first drain is no shed", pacing{}, 0, ReasonDrain, 0, at()},
		{"just under ShedInterval after a shed", pacing{last: t0, moves: at(0)}, interval - time.Nanosecond, ReasonShed, time.Nanosecond, at(0)},
		{"ShedInterval after a shed", pacing{last: t0, moves: at(0)}, interval, ReasonShed, 0, at(0, interval)},
		{"a drain right after a shed waits too", pacing{last: t0, moves: at(0)}, interval / 2, ReasonDrain, interval / 2, at(0)},
		{"MaxMoves reached within the window", pacing{last: t0.Add(interval), moves: at(0, interval)}, 2 * interval, ReasonShed, window - 2*interval, at(0, interval)},
		{"MaxMoves reached, just before the window moves on", pacing{last: t0.Add(interval), moves: at(0, interval)}, window - time.Nanosecond, ReasonShed, time.Nanosecond, at(0, interval)},
		{"MaxMoves reached, the oldest leaves the window", pacing{last: t0.Add(interval), moves: at(0, interval)}, window, ReasonShed, 0, at(interval, window)},
		{"MaxMoves does not hold a drain", pacing{last: t0.Add(interval), moves: at(0, interval)}, 2 * interval, ReasonDrain, 0, at(0, interval)},
		{"sheds long ago are forgotten", pacing{last: t0, moves: at(0, interval)}, time.Hour, ReasonShed, 0, at(time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := slices.Clone(tc.p.moves)
			now := t0.Add(tc.now)
			p, wait := pace(tc.p, now, tc.reason, interval, maxMoves, window)
			if wait != tc.wait || !slices.Equal(p.moves, tc.wantMoves) {
				t.Fatalf("pace = moves %v, wait %v; want moves %v, wait %v", p.moves, wait, tc.wantMoves, tc.wait)
			}
			if goes := wait == 0; goes != p.last.Equal(now) {
				t.Fatalf("a move that goes (%v) must be the last one, last %v", goes, p.last)
			}
			if !slices.Equal(tc.p.moves, before) {
				t.Fatalf("pace changed its input's moves: %v, was %v", tc.p.moves, before)
			}
		})
	}
}

func TestDecideUnfit(t *testing.T) {
	const grace = 500 * time.Millisecond
	now := t0.Add(time.Hour)
	unfit := func(change func(*record)) record {
		rec := record{held: true, heldSince: t0, unfit: true}
		if change != nil {
			change(&rec)
		}
		return rec
	}
	movedAgo := func(d time.Duration) func(*record) { return func(r *record) { r.unfitMoved = now.Add(-d) } }
	askedAgo := func(d time.Duration) func(*record) { return func(r *record) { r.unfitAsked = now.Add(-d) } }
	// Lines as the leader (self) sees them, leader first.
	fit := func(id string) worker { return worker{id: id, known: true, m: member{TemporalOK: true}} }
	cut := func(id string) worker { return worker{id: id, known: true} } // it cannot reach Temporal
	self := fit("self")
	self.m.TemporalOK = false
	taker := []worker{self, fit("w1")}
	nobody := []worker{self}
	for _, tc := range []struct {
		name   string
		rec    record
		line   []worker
		selfOK bool
		want   unfitDecision
	}{
		{"fit", record{held: true}, taker, false, unfitDecision{}},
		{"unfit, a taker in line", unfit(nil), taker, false, unfitDecision{unfit: true, move: true}},
		{"unfit, nobody to take it, never asked", unfit(nil), nobody, false, unfitDecision{unfit: true, ask: true}},
		{"unfit, asked just under Grace ago", unfit(askedAgo(grace - time.Nanosecond)), nobody, false, unfitDecision{unfit: true}},
		{"unfit, asked Grace ago", unfit(askedAgo(grace)), nobody, false, unfitDecision{unfit: true, ask: true}},
		{"unfit, takeover under way", unfit(func(r *record) { r.takeovers = 1 }), taker, false, unfitDecision{unfit: true}},
		{"unfit, handed over as unfit just under UnfitPause ago", unfit(movedAgo(UnfitPause - time.Nanosecond)), taker, false, unfitDecision{unfit: true}},
		{"unfit, handed over as unfit UnfitPause ago", unfit(movedAgo(UnfitPause)), taker, false, unfitDecision{unfit: true, move: true}},
		{"unfit within the pause, nobody to take it: no ask either", unfit(movedAgo(time.Minute)), nobody, false, unfitDecision{unfit: true}},
		// A Temporal outage: every worker in line is unfit too. The queue stays, and the leader asks.
		{"unfit, the only taker cannot reach Temporal: keep, ask", unfit(nil), []worker{self, cut("w1")}, false, unfitDecision{unfit: true, ask: true}},
		{"unfit, no taker reaches Temporal, asked just now: keep", unfit(askedAgo(0)), []worker{self, cut("w1"), cut("w2")}, false, unfitDecision{unfit: true}},
		{"unfit, a taker of unknown record: keep, ask", unfit(nil), []worker{self, {id: "w1", m: member{TemporalOK: true}}}, false, unfitDecision{unfit: true, ask: true}},
		{"unfit, the fit taker drains: keep, ask", unfit(nil), []worker{self, {id: "w1", known: true, m: member{TemporalOK: true, Draining: true}}}, false, unfitDecision{unfit: true, ask: true}},
		// Only the leader cannot reach Temporal: the queue moves to the first that can.
		{"unfit, a fit taker behind an unfit one: move", unfit(nil), []worker{self, cut("w1"), fit("w2")}, false, unfitDecision{unfit: true, move: true}},
		{"unfit, only self reports fit: keep, ask", unfit(nil), []worker{fit("self"), cut("w1")}, false, unfitDecision{unfit: true, ask: true}},
		// The server is back: this worker's own check passes too, before its progress check ends the mark.
		{"unfit, a fit taker, but self reaches Temporal again: keep, no ask", unfit(nil), taker, true, unfitDecision{unfit: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			asked := false
			selfOK := func() bool { asked = true; return tc.selfOK }
			if got := decideUnfit(tc.rec, now, "self", tc.line, selfOK, grace); got != tc.want {
				t.Fatalf("decideUnfit = %+v, want %+v", got, tc.want)
			}
			// The reach check is a call to Temporal: asked only when the queue would move.
			if tc.want.move && !asked || asked && !tc.want.move && !tc.selfOK {
				t.Fatalf("reach check asked = %v, want it asked only when a move is on the table", asked)
			}
		})
	}
}

func TestFitTaker(t *testing.T) {
	fit := func(id string) worker { return worker{id: id, known: true, m: member{TemporalOK: true}} }
	cut := worker{id: "w1", known: true}
	for _, tc := range []struct {
		name string
		line []worker
		want string
	}{
		{"empty", nil, ""},
		{"self only", []worker{fit("self")}, ""},
		{"first fit behind the unfit", []worker{fit("self"), cut, fit("w2"), fit("w3")}, "w2"},
		{"nobody fit", []worker{fit("self"), cut}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := fitTaker("self", tc.line); got != tc.want {
				t.Fatalf("fitTaker = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestDecideHeld(t *testing.T) {
	const grace = 500 * time.Millisecond
	unfit, move := unfitDecision{unfit: true}, unfitDecision{unfit: true, move: true}
	for _, tc := range []struct {
		name     string
		shed     moveDecision
		transfer bool
		unfit    unfitDecision
		reason   string
		wait     time.Duration
	}{
		{"nothing", moveDecision{}, false, unfitDecision{}, "", 0},
		{"a shed", moveDecision{reason: ReasonShed}, false, unfitDecision{}, ReasonShed, 0},
		{"a paced shed", moveDecision{wait: time.Second}, false, unfitDecision{}, "", time.Second},
		{"a transfer beats a paced shed", moveDecision{wait: time.Second}, true, unfitDecision{}, ReasonTransfer, 0},
		{"a transfer beats an unfit move", moveDecision{}, true, move, ReasonTransfer, 0},
		{"an unfit move beats a drain", moveDecision{reason: ReasonDrain}, false, move, ReasonUnfit, 0},
		{"unfit, kept: looked at again within Grace", moveDecision{}, false, unfit, "", grace},
		{"unfit, kept, a long pacing wait: Grace", moveDecision{wait: time.Minute}, false, unfit, "", grace},
		{"unfit, kept, a short pacing wait stays", moveDecision{wait: grace / 2}, false, unfit, "", grace / 2},
		{"unfit, kept, a drain goes all the same", moveDecision{reason: ReasonDrain}, false, unfit, ReasonDrain, grace},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reason, wait := decideHeld(tc.shed, tc.transfer, tc.unfit, grace)
			if reason != tc.reason || wait != tc.wait {
				t.Fatalf("decideHeld = %q, %v; want %q, %v", reason, wait, tc.reason, tc.wait)
			}
		})
	}
}

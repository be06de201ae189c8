package balance

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// t0 is the made-up time the decision tables count from: far from the wall clock's, so a decision
// that read the wall clock would be off by decades.
var t0 = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// behind is a standFacts for worker w0 (v2) behind leader w1 (v2, known): 10 queues on 2 workers,
// fair share 5, ShedAbove 1.25; w0 leads 2, w1 leads 8 (more than 6.25: it may shed).
func behind(change func(*standFacts)) standFacts {
	f := standFacts{self: "w0", version: "v2", leader: worker{id: "w1", m: member{Version: "v2"}, known: true},
		leading: 2, fair: 5, leaderLeads: 8, shedAbove: 1.25}
	if change != nil {
		change(&f)
	}
	return f
}

func TestMayStandBehind(t *testing.T) {
	named := func(to, from, reason string) func(*standFacts) {
		return func(f *standFacts) { f.hint, f.hinted = hint{To: to, From: from, Reason: reason}, true }
	}
	and := func(fs ...func(*standFacts)) func(*standFacts) {
		return func(f *standFacts) {
			for _, g := range fs {
				g(f)
			}
		}
	}
	draining := func(f *standFacts) { f.draining = true }
	leaderDrains := func(f *standFacts) { f.leader.m.Draining = true }
	atShare := func(f *standFacts) { f.leading = 5 }
	rollout := func(leader, self string) func(*standFacts) {
		return func(f *standFacts) { f.rollout, f.leader.m.Version, f.version = true, leader, self }
	}
	for _, tc := range []struct {
		name string
		f    standFacts
		want bool
	}{
		// The fair-share rule.
		{"below share, behind a leader that may shed", behind(nil), true},
		{"at the fair share (a tie with it)", behind(atShare), false},
		{"over the fair share", behind(func(f *standFacts) { f.leading = 7 }), false},
		{"leader at exactly ShedAbove × fair share (not above)", behind(func(f *standFacts) { f.fair, f.leaderLeads = 4, 5 }), false},
		{"leader one above ShedAbove × fair share", behind(func(f *standFacts) { f.fair, f.leaderLeads = 4, 6 }), true},
		{"leader within its share", behind(func(f *standFacts) { f.leaderLeads = 5 }), false},
		// A named successor: the others defer, whatever else holds.
		{"named successor, over its share", behind(and(named("w0", "w1", ReasonShed), func(f *standFacts) { f.leading = 9 })), true},
		{"named successor, draining itself", behind(and(named("w0", "w1", ReasonResign), draining)), true},
		{"another is named, though the leader drains", behind(and(named("w2", "w1", ReasonDrain), leaderDrains)), false},
		{"another is named, below share behind a heavy leader", behind(named("w2", "w1", ReasonShed)), false},
		{"hint of a former leader is not the leader's word", behind(and(named("w2", "w9", ReasonShed))), true},
		// A draining worker stands nowhere a leader holds.
		{"draining, behind a leader that may shed", behind(draining), false},
		{"draining, behind a draining leader", behind(and(draining, leaderDrains)), false},
		{"draining, behind an unfit leader", behind(and(draining, named("", "w1", ReasonUnfit))), false},
		{"draining, during a rollout behind an older leader", behind(and(draining, rollout("v1", "v2"))), false},
		// A leader that must hand over gets candidates.
		{"leader drains, this worker over its share", behind(and(leaderDrains, func(f *standFacts) { f.leading = 9 })), true},
		{"leader drains during a rollout, newer than this worker", behind(and(leaderDrains, rollout("v3", "v2"))), true},
		{"leader asked to stand, being unfit", behind(and(named("", "w1", ReasonUnfit), atShare)), true},
		{"an unfit ask by a former leader", behind(and(named("", "w9", ReasonUnfit), atShare)), false},
		{"an unnamed hint of another reason", behind(and(named("", "w1", ReasonShed), atShare)), false},
		{"leader's record unknown: not taken for draining", behind(and(atShare, func(f *standFacts) { f.leader = worker{id: "w1"} })), false},
		// Forward only during a rollout; no rebalancing.
		{"rollout, leader older", behind(and(atShare, rollout("v1", "v2"))), true},
		{"rollout, leader newer", behind(rollout("v3", "v2")), false},
		{"rollout, same version, below share behind a heavy leader", behind(rollout("v2", "v2")), false},
		{"rollout, natural order: v1.10 is newer than v1.9", behind(rollout("v1.9", "v1.10")), true},
		{"rollout, leader unversioned", behind(rollout("", "v2")), false},
		{"rollout, this worker unversioned", behind(rollout("v1", "")), false},
		{"rollout, leader's record unknown", behind(and(rollout("", "v2"), func(f *standFacts) { f.leader = worker{id: "w1"} })), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mayStandBehind(tc.f); got != tc.want {
				t.Fatalf("mayStandBehind(%+v) = %v, want %v", tc.f, got, tc.want)
			}
		})
	}
}

func TestVacancyWait(t *testing.T) {
	const settle, vacant = 500 * time.Millisecond, time.Second
	f := func(now time.Duration, rank int, vacantSince time.Duration) vacancyFacts {
		return vacancyFacts{now: t0.Add(now), started: t0, vacantSince: t0.Add(vacantSince), rank: rank, settle: settle, vacantWait: vacant}
	}
	for _, tc := range []struct {
		name string
		f    vacancyFacts
		want time.Duration
	}{
		{"first-ranked, at start", f(0, 0, 0), settle},
		{"first-ranked, just before Settle ends", f(settle-time.Nanosecond, 0, 0), time.Nanosecond},
		{"first-ranked, as Settle ends", f(settle, 0, 0), 0},
		{"first-ranked, after Settle", f(settle+time.Second, 0, 0), -time.Second},
		{"second-ranked, just before its wait ends", f(settle+vacant-time.Nanosecond, 1, 0), time.Nanosecond},
		{"second-ranked, as its wait ends", f(settle+vacant, 1, 0), 0},
		{"third-ranked waits twice VacantWait", f(settle, 2, 0), 2 * vacant},
		{"tenth-ranked waits no longer than the third", f(settle, 9, 0), 2 * vacant},
		{"fell vacant after Settle: counted from then", f(time.Hour, 0, time.Hour), 0},
		{"fell vacant after Settle, second-ranked", f(time.Hour, 1, time.Hour), vacant},
		{"fell vacant during Settle: Settle still counts", f(0, 1, settle/2), settle + vacant},
		{"does not rank (draining)", f(time.Hour, int(^uint(0)>>1), 0), settle + 2*vacant - time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := vacancyWait(tc.f); got != tc.want {
				t.Fatalf("vacancyWait = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRanks(t *testing.T) {
	for _, tc := range []struct {
		name    string
		m       member
		rollout bool
		want    bool
	}{
		{"a plain member", member{Version: "v1"}, false, true},
		{"draining", member{Version: "v2", Draining: true}, false, false},
		{"older during a rollout", member{Version: "v1"}, true, false},
		{"newest during a rollout", member{Version: "v2"}, true, true},
		{"unversioned during a rollout", member{}, true, true},
		{"older, no rollout (the newest is an old record)", member{Version: "v1"}, false, true},
	} {
		if got := ranks(tc.m, tc.rollout, "v2"); got != tc.want {
			t.Errorf("%s: ranks = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// Every worker, whatever its version, must compute the same order for a vacant queue, or two
// versions in one fleet would both rank first (or neither). The order is pinned here: a change of
// the hash is a change every worker must make at once.
func TestRankAmongIsOneOrderForAll(t *testing.T) {
	ids := []string{"w0", "w1", "w2", "w3"}
	pinned := map[string][]string{} // queue -> ids, first-ranked first
	for _, q := range []string{"q0", "q1", "orders", "payments"} {
		order := make([]string, len(ids))
		for _, self := range ids {
			others := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return id == self })
			n := rankAmong(q, self, others)
			if n < 0 || n >= len(ids) || order[n] != "" {
				t.Fatalf("queue %s: %s ranks %d, taken by %q: not one order (%v)", q, self, n, order[n], order)
			}
			order[n] = self
		}
		pinned[q] = order
	}
	want := map[string][]string{
		"q0": {"w2", "w3", "w0", "w1"}, "q1": {"w1", "w0", "w2", "w3"},
		"orders": {"w0", "w3", "w2", "w1"}, "payments": {"w1", "w0", "w3", "w2"},
	}
	for q, order := range pinned {
		if !slices.Equal(order, want[q]) {
			t.Errorf("queue %s: order %v, want %v", q, order, want[q])
		}
	}
	if n := rankAmong("q0", "w0", nil); n != 0 {
		t.Errorf("alone: rank %d, want 0", n)
	}
}

// A vacancy racing a join: a worker that joins and ranks above this one for the vacant queue turns
// this worker's "stand now" into "wait VacantWait", at the same instant.
func TestVacancyRacingAJoin(t *testing.T) {
	for i := range 50 {
		q := fmt.Sprintf("q%d", i)
		if rankAmong(q, "w0", []string{"w1"}) != 0 || rankAmong(q, "w2", []string{"w0", "w1"}) != 0 {
			continue // the joiner w2 must rank first, w0 second before it joined
		}
		f := vacancyFacts{now: t0.Add(time.Second), started: t0, vacantSince: t0, settle: 500 * time.Millisecond, vacantWait: time.Second}
		f.rank = rankAmong(q, "w0", []string{"w1"})
		if w := vacancyWait(f); w > 0 {
			t.Fatalf("%s before the join: wait %v, want none", q, w)
		}
		f.rank = rankAmong(q, "w0", []string{"w1", "w2"})
		if w := vacancyWait(f); w != 500*time.Millisecond {
			t.Fatalf("%s after w2 joined, ranking first: wait %v, want 500ms", q, w)
		}
		return
	}
	t.Fatal("no queue where the joiner ranks first: the case is not exercised")
}

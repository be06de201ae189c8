package balance

import (
	"fmt"
	"testing"
	"time"
)

// testRunner is a Runner of worker self over queues that never ran: its view and roster are filled
// by hand.
func testRunner(self string, queues []string, members ...string) *Runner {
	v := newView("/e/p/", self, queues)
	r := &Runner{cfg: Config{Project: "p", ServerID: self, Queues: queues}.WithDefaults(), view: v,
		records: map[string]*record{}, named: map[string][]time.Time{}}
	r.roster = newRoster(Keys{ElectionPrefix: "/e"}, "p", self, "", 10*time.Second, r.log, v.poke, v.wake)
	for _, id := range members { // workers that reach Temporal, unless a test says otherwise
		r.roster.members[id] = member{TemporalOK: true}
	}
	return r
}

func queueNames(n int) []string {
	qs := make([]string, n)
	for i := range qs {
		qs[i] = fmt.Sprintf("q%05d", i)
	}
	return qs
}

// Every worker computes the same order, so exactly one ranks first for each vacant queue, and the
// ranks spread 10,000 queues over 10 workers evenly (the hash is fixed, so this is not a matter of
// luck from run to run).
func TestVacantQueuesSpreadByRank(t *testing.T) {
	queues := queueNames(10_000)
	ids := []string{"w0", "w1", "w2", "w3", "w4", "w5", "w6", "w7", "w8", "w9"}
	runners := make([]*Runner, len(ids))
	for i, id := range ids {
		runners[i] = testRunner(id, queues, ids...)
	}
	counts := make([]int, len(ids))
	for _, q := range queues {
		first := 0
		for i, r := range runners {
			if r.ranksFirst(q) {
				first++
				counts[i]++
			}
		}
		if first != 1 {
			t.Fatalf("queue %s: %d workers rank first, want 1", q, first)
		}
	}
	for i, n := range counts {
		if n < 900 || n > 1100 {
			t.Fatalf("worker %s ranks first for %d of 10,000 queues, want 1,000 ± 10 %% (all: %v)", ids[i], n, counts)
		}
	}
}

// A member that drains, one of an older version during a rollout, and one whose keys all went do not
// rank: the next worker goes first.
func TestVacantRankSkipsWhoCannotLead(t *testing.T) {
	queues := queueNames(200)
	for _, tc := range []struct {
		name string
		skip func(r *Runner) // makes w1 unable to lead, as seen by r
	}{
		{"draining", func(r *Runner) { r.roster.members["w1"] = member{Draining: true} }},
		{"older version in a rollout", func(r *Runner) {
			r.roster.members["w1"], r.roster.members["w2"] = member{Version: "1.0"}, member{Version: "2.0"}
			r.roster.versions, r.roster.newest = 2, "2.0"
			r.cfg.Version = "2.0"
		}},
		{"gone", func(r *Runner) {
			r.view.apply("/e/p/q00000/1", "w1", 1, false)
			r.view.apply("/e/p/q00000/1", "", 0, true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w1, w2 := testRunner("w1", queues, "w1", "w2"), testRunner("w2", queues, "w1", "w2")
			tc.skip(w2)
			var w1First int
			for _, q := range queues {
				if w1.ranksFirst(q) {
					w1First++
					if !w2.ranksFirst(q) {
						t.Fatalf("queue %s: w1 ranks first, and w2, which cannot count on w1, does not", q)
					}
				}
			}
			if w1First == 0 {
				t.Fatal("w1 ranks first nowhere: the case is not exercised")
			}
		})
	}
}

// The first-ranked worker stands for a vacant queue once Settle has passed since its start; the second
// waits VacantWait more after the queue fell vacant, the others twice that, and then they stand all
// the same.
func TestVacantWait(t *testing.T) {
	queues := queueNames(50)
	r := testRunner("w0", queues, "w0", "w1", "w2")
	t0 := time.Now()
	r.started, r.view.loadedAt = t0, t0
	byRank := map[int]string{}
	for _, q := range queues {
		if n := r.rankOf(q); byRank[n] == "" {
			byRank[n] = q
		}
	}
	if len(byRank) != 3 {
		t.Fatalf("ranks seen %v, want 0, 1 and 2", byRank)
	}
	settle, vacant := r.cfg.Settle, r.cfg.VacantWait
	// A wait counted from since is want less the time that passed since then, however loaded the
	// machine.
	near := func(got, want time.Duration, since time.Time) bool {
		return got <= want && got >= want-time.Since(since)
	}
	for n, want := range []time.Duration{settle, settle + vacant, settle + 2*vacant} {
		if w := r.vacantWait(byRank[n]); !near(w, want, t0) {
			t.Fatalf("ranked %d: wait %v, want about %v", n, w, want)
		}
	}
	r.started = time.Now().Add(-time.Hour)
	r.view.loadedAt = time.Now().Add(-time.Hour)
	for n := range 3 {
		if ok, w := r.mayStandIn(byRank[n]); !ok || w > 0 {
			t.Fatalf("ranked %d, vacant for an hour: may stand %v, wait %v", n, ok, w)
		}
	}
	// The queue falls vacant now: the wait starts over.
	other := byRank[1]
	t1 := time.Now()
	r.view.apply("/e/p/"+other+"/1", "w9", 1, false) // not a member: the ranks stay
	r.view.apply("/e/p/"+other+"/1", "", 0, true)
	if ok, w := r.mayStandIn(other); ok || !near(w, vacant, t1) {
		t.Fatalf("ranked second, vacant just now: may stand %v, wait %v; want false, about %v", ok, w, vacant)
	}
}

// Below its fair share a worker stands in line only behind a leader that may shed (one that leads
// more than ShedAbove × fair share): anywhere else its candidacy would win it nothing.
func TestStandsInLineOnlyBehindALeaderThatMayShed(t *testing.T) {
	queues := queueNames(100)
	r := testRunner("w0", queues, "w0", "w1", "w2")
	// w1 leads 70, w2 leads 30: fair share 34 (3 workers, this one included), ShedAbove × fair 42.5.
	for i, q := range queues {
		id := "w1"
		if i >= 70 {
			id = "w2"
		}
		r.view.apply("/e/p/"+q+"/1", id, int64(i+1), false)
	}
	if !r.mayStand(queues[0]) {
		t.Fatal("behind w1, which leads 70 of 100 on three workers: may not stand")
	}
	if r.mayStand(queues[99]) {
		t.Fatal("behind w2, which leads 30 of 100 on three workers: may stand")
	}
}

// A gone worker is remembered for goneFor only (its member record has expired by then), and the IDs
// of a long life of rolling restarts do not pile up.
func TestGoneIsForgotten(t *testing.T) {
	v := newView("/e/p/", "w0", []string{"a"})
	v.goneFor = time.Hour
	v.apply("/e/p/a/1", "w1", 1, false)
	v.apply("/e/p/a/1", "", 0, true)
	if !v.isGone("w1") {
		t.Fatal("w1's only key went: not gone")
	}
	v.gone["w1"] = time.Now().Add(-2 * time.Hour)
	if v.isGone("w1") {
		t.Fatal("w1 went two goneFor ago: still gone")
	}
	v.apply("/e/p/a/2", "w2", 2, false)
	v.apply("/e/p/a/2", "", 0, true)
	if _, ok := v.gone["w1"]; ok || !v.isGone("w2") {
		t.Fatalf("after w2 went: gone %v, want w2 only", v.gone)
	}
	v.apply("/e/p/a/3", "w2", 3, false)
	if v.isGone("w2") {
		t.Fatal("w2 stands again: still gone")
	}
}

package balance

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
)

// The Runner gathers each decision's facts from the view, the roster and the queue's record. These
// scenarios build a small fleet by hand, as worker w0 sees it, and check the decision the Runner
// reaches: a fact fed from the wrong place (the leader's record for a candidate's, keeping for
// leading) changes their outcome where the decision tables alone would not see it.

// fleet is worker w0's Runner on a fake clock, with the candidate keys and member records set by hand.
type fleet struct {
	t    *testing.T
	r    *Runner
	fake *clock.Fake
	rev  int64
}

func newFleet(t *testing.T, queues ...string) *fleet {
	r, fake := fakeRunner("w0", queues)
	return &fleet{t: t, r: r, fake: fake}
}

// member publishes id's record.
func (f *fleet) member(id, version string, draining bool) *fleet {
	f.r.roster.mu.Lock()
	f.r.roster.members[id] = member{Version: version, Draining: draining, Since: f.rev, TemporalOK: true}
	f.r.roster.recompute()
	f.r.roster.mu.Unlock()
	if id == f.r.cfg.ServerID {
		f.r.cfg.Version = version
		f.r.roster.setDraining(draining)
	}
	return f
}

// line puts ids in queue's line behind the current one, in order (the first leads an empty line);
// w0 leading the queue holds it.
func (f *fleet) line(queue string, ids ...string) *fleet {
	for _, id := range ids {
		f.rev++
		f.r.view.apply(fmt.Sprintf("/e/p/%s/%d", queue, f.rev), id, f.rev, false)
	}
	if f.r.view.leader(queue) == f.r.cfg.ServerID && !f.r.isHeld(queue) {
		f.r.setHeld(queue, true)
	}
	return f
}

// hint records a hint of queue as w0's watch would bring it, now.
func (f *fleet) hint(queue string, h hint) *fleet {
	b := fmt.Sprintf(`{"to":%q,"from":%q,"reason":%q}`, h.To, h.From, h.Reason)
	f.r.roster.mu.Lock()
	f.r.roster.apply(f.r.roster.hintKey(queue), []byte(b), false)
	f.r.roster.mu.Unlock()
	return f
}

// aged moves the clock past every Cooldown.
func (f *fleet) aged() *fleet {
	f.fake.Advance(time.Hour)
	return f
}

func TestDrainGathering(t *testing.T) {
	for _, tc := range []struct {
		name    string
		build   func(f *fleet)
		reason  string
		waiting bool // HandOverWaiting says why the queue stays
	}{
		{"a worker in line takes it", func(f *fleet) { f.member("w1", "", false).line("a", "w0", "w1") }, ReasonDrain, false},
		{"only the draining worker serves the queue", func(f *fleet) { f.line("a", "w0") }, "", true},
		{"the only other in line drains too", func(f *fleet) { f.member("w2", "", true).line("a", "w0", "w2") }, "", true},
		{"a draining worker in line, a taker behind it", func(f *fleet) {
			f.member("w2", "", true).member("w1", "", false).line("a", "w0", "w2", "w1")
		}, ReasonDrain, false},
		{"a taker whose record is not seen yet", func(f *fleet) { f.line("a", "w0", "w9") }, ReasonDrain, false},
		{"draining, just won, during a rollout", func(f *fleet) {
			f.member("w1", "v2", false).line("a", "w0", "w1")
			f.r.roster.members["w0"] = member{Version: "v1", Draining: true}
			f.r.roster.recompute()
		}, ReasonDrain, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, "a", "b")
			f.member("w0", "", true)
			tc.build(f)
			if reason, _ := f.r.shouldShed("a"); reason != tc.reason {
				t.Fatalf("shouldShed = %q, want %q", reason, tc.reason)
			}
			if got := f.r.HandOverWaiting("a") != ""; got != tc.waiting {
				t.Fatalf("HandOverWaiting says a queue waits: %v, want %v", got, tc.waiting)
			}
			if f.r.HandOverWaiting("b") != "" {
				t.Fatal("HandOverWaiting speaks of a queue this worker does not lead")
			}
		})
	}
}

func TestShedGathering(t *testing.T) {
	// w0 leads a and b, w1 stands behind w0 for both and leads none: 2 queues on 2 workers.
	twoOnTwo := func(f *fleet) {
		f.member("w0", "", false).member("w1", "", false).line("a", "w0", "w1").line("b", "w0", "w1").aged()
	}
	ab, abcd := []string{"a", "b"}, []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name   string
		queues []string // w0's queues (the fair share counts them)
		queue  string
		build  func(f *fleet)
		reason string
	}{
		{"2 on 2: one goes", ab, "a", twoOnTwo, ReasonShed},
		{"2 on 2, one already on its way: the other stays", ab, "a", func(f *fleet) { twoOnTwo(f); f.r.shedding = 1 }, ""},
		{"just won: Cooldown", ab, "a", func(f *fleet) {
			f.member("w0", "", false).member("w1", "", false).line("a", "w0", "w1").line("b", "w0", "w1")
		}, ""},
		{"a candidate without a record", ab, "a", func(f *fleet) { twoOnTwo(f); f.line("b", "w7") }, ""},
		{"a rollout", ab, "a", func(f *fleet) { twoOnTwo(f); f.member("w1", "v2", false).member("w0", "v1", false) }, ""},
		{"a takeover under way", ab, "a", func(f *fleet) { twoOnTwo(f); f.r.TakingOver("a") }, ""},
		{"4 of 4 on 2, nobody else stands for this queue", abcd, "c", func(f *fleet) { twoOnTwo(f); f.line("c", "w0").line("d", "w0").aged() }, ""},
		{"4 of 4 on 2, another stands", abcd, "a", func(f *fleet) { twoOnTwo(f); f.line("c", "w0").line("d", "w0") }, ReasonShed},
		{"3 of 4 on 2, another stands", abcd, "a", func(f *fleet) { twoOnTwo(f); f.line("c", "w0") }, ReasonShed}, // 3 > 2.5, w1 leads 0,
		{"2 of 4 each: the worker in line leads as many", abcd, "a", func(f *fleet) {
			twoOnTwo(f)
			f.line("c", "w1").line("d", "w1")
		}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, tc.queues...)
			tc.build(f)
			if reason, _ := f.r.shouldShed(tc.queue); reason != tc.reason {
				t.Fatalf("shouldShed(%s) = %q, want %q (leading %d, fair %d)", tc.queue, reason, tc.reason, f.r.Leading(), f.r.FairShare())
			}
		})
	}
}

func TestStandGathering(t *testing.T) {
	// 4 queues on 2 workers: fair share 2. w1 leads a, b and c (more than 2.5: it may shed).
	heavy := func(f *fleet) {
		f.member("w0", "", false).member("w1", "", false).line("a", "w1").line("b", "w1").line("c", "w1")
	}
	for _, tc := range []struct {
		name  string
		build func(f *fleet)
		want  bool
	}{
		{"below share, behind a leader that may shed", heavy, true},
		{"w0 at its share", func(f *fleet) { heavy(f); f.line("d", "w0"); f.line("z", "w0") }, false},
		{"w0 draining", func(f *fleet) { heavy(f); f.member("w0", "", true) }, false},
		{"the leader drains, w0 at its share", func(f *fleet) {
			heavy(f)
			f.line("d", "w0").line("z", "w0").member("w1", "", true)
		}, true},
		{"the leader named another", func(f *fleet) { heavy(f); f.hint("a", hint{To: "w2", From: "w1", Reason: ReasonShed}) }, false},
		{"the leader named w0, at its share", func(f *fleet) {
			heavy(f)
			f.line("d", "w0").line("z", "w0").hint("a", hint{To: "w0", From: "w1", Reason: ReasonShed})
		}, true},
		{"the leader asked for candidates, unfit", func(f *fleet) {
			heavy(f)
			f.line("d", "w0").line("z", "w0").hint("a", hint{From: "w1", Reason: ReasonUnfit})
		}, true},
		{"rollout, w0 newer than the leader", func(f *fleet) {
			heavy(f)
			f.line("d", "w0").line("z", "w0").member("w1", "v1", false).member("w0", "v2", false)
		}, true},
		{"rollout, w0 older than the leader", func(f *fleet) { heavy(f); f.member("w1", "v2", false).member("w0", "v1", false) }, false},
		{"a key of w0's leads, left by an earlier campaign", func(f *fleet) {
			f.member("w1", "", false).line("a", "w0", "w1")
			f.r.setHeld("a", false)
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, "a", "b", "c", "d", "z")
			f.r.cfg.Queues = []string{"a", "b", "c", "d"}
			tc.build(f)
			if got := f.r.mayStand("a"); got != tc.want {
				t.Fatalf("mayStand(a) = %v, want %v (leading %d, fair %d)", got, tc.want, f.r.Leading(), f.r.FairShare())
			}
			if l := f.r.view.leader("a"); l != "w0" && f.r.shouldWithdraw("a") == tc.want {
				t.Fatalf("shouldWithdraw(a) = %v behind %s, want the opposite of mayStand", !tc.want, l)
			}
		})
	}
}

// The others defer to a named successor for the deferral window (the hand-over and two Graces), on
// the clock of this worker, from when its watch brought the hint: at the window's end still, a
// nanosecond later no more.
func TestHintDeferralWindow(t *testing.T) {
	f := newFleet(t, "a", "b", "c", "d")
	f.r.handOver = 3 * time.Second
	f.member("w0", "", false).member("w1", "", false).line("a", "w1").line("b", "w1").line("c", "w1")
	f.hint("a", hint{To: "w2", From: "w1", Reason: ReasonShed})
	window := f.r.deferral()
	if window != 3*time.Second+2*f.r.cfg.Grace {
		t.Fatalf("deferral %v, want the hand-over and two Graces", window)
	}
	f.fake.Advance(window)
	if f.r.mayStand("a") {
		t.Fatal("at the window's end: w0 stands, though w2 is named")
	}
	f.fake.Advance(time.Nanosecond)
	if !f.r.mayStand("a") {
		t.Fatal("after the window: w0 still defers to w2")
	}
}

func TestRankOfGathering(t *testing.T) {
	queues := queueNames(40)
	for _, tc := range []struct {
		name  string
		build func(f *fleet)
		last  bool // w0 ranks last for every queue
		alone bool // w0 ranks first for every queue
	}{
		{"alone", func(f *fleet) { f.member("w0", "v1", false) }, false, true},
		{"draining", func(f *fleet) { f.member("w1", "v1", false).member("w0", "v1", true) }, true, false},
		{"older during a rollout", func(f *fleet) { f.member("w1", "v2", false).member("w0", "v1", false) }, true, false},
		{"the others drain", func(f *fleet) { f.member("w0", "v1", false).member("w1", "v1", true).member("w2", "v1", true) }, false, true},
		{"the others are older during a rollout", func(f *fleet) { f.member("w0", "v2", false).member("w1", "v1", false) }, false, true},
		{"the other is gone", func(f *fleet) {
			f.member("w0", "v1", false).member("w1", "v1", false)
			f.line(queues[0], "w1")
			f.r.view.apply(fmt.Sprintf("/e/p/%s/%d", queues[0], f.rev), "", 0, true)
		}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, queues...)
			tc.build(f)
			for _, q := range queues {
				n := f.r.rankOf(q)
				if tc.last && n != math.MaxInt || tc.alone && n != 0 {
					t.Fatalf("rank for %s = %d; last %v, alone %v", q, n, tc.last, tc.alone)
				}
			}
		})
	}
}

func TestStopReasonGathering(t *testing.T) {
	for _, tc := range []struct {
		name  string
		build func(f *fleet)
		want  string
	}{
		{"a plain stop", func(f *fleet) { f.member("w0", "v1", false).member("w1", "v1", false) }, ReasonResign},
		{"draining", func(f *fleet) { f.member("w0", "v1", true) }, ReasonDrain},
		{"a newer version is live", func(f *fleet) { f.member("w0", "v1", false).member("w1", "v2", false) }, ReasonRollout},
		{"this worker is the newest", func(f *fleet) { f.member("w0", "v2", false).member("w1", "v1", false) }, ReasonResign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, "a")
			tc.build(f)
			if got := f.r.stopReason(); got != tc.want {
				t.Fatalf("stopReason = %q, want %q", got, tc.want)
			}
		})
	}
}

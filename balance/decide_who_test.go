package balance

import (
	"testing"
)

func TestFirstTaker(t *testing.T) {
	w := func(id string, draining bool) worker {
		return worker{id: id, m: member{Draining: draining}, known: true}
	}
	for _, tc := range []struct {
		name string
		line []worker
		want string
	}{
		{"nobody in line", nil, ""},
		{"only this worker", []worker{w("w0", true)}, ""},
		{"a queue only the draining worker serves", []worker{w("w0", true), w("w2", true)}, ""},
		{"the first in line after this worker", []worker{w("w0", true), w("w1", false), w("w2", false)}, "w1"},
		{"a draining worker in line is passed over", []worker{w("w0", true), w("w1", true), w("w2", false)}, "w2"},
		{"this worker behind the taker (not leading)", []worker{w("w1", false), w("w0", false)}, "w1"},
		{"a worker whose record is unknown takes", []worker{w("w0", true), {id: "w3"}}, "w3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstTaker("w0", tc.line); got != tc.want {
				t.Fatalf("firstTaker = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPickSuccessor(t *testing.T) {
	c := func(id, version string, led int, since int64) successorFacts {
		return successorFacts{worker: worker{id: id, m: member{Version: version, Since: since}, known: true}, led: led}
	}
	drained := c("w8", "v3", 0, 1)
	drained.m.Draining = true
	unknown := successorFacts{worker: worker{id: "w9"}, led: 0}
	for _, tc := range []struct {
		name    string
		version string // this worker's (w0)
		cands   []successorFacts
		want    string
	}{
		{"nobody", "v2", nil, ""},
		{"only this worker", "v2", []successorFacts{c("w0", "v2", 0, 1)}, ""},
		{"only a draining worker", "v2", []successorFacts{drained}, ""},
		{"fewest led", "v2", []successorFacts{c("w1", "v2", 3, 1), c("w2", "v2", 2, 9)}, "w2"},
		{"a tie in queues led: the oldest", "v2", []successorFacts{c("w1", "v2", 2, 9), c("w2", "v2", 2, 5), c("w3", "v2", 2, 7)}, "w2"},
		{"the newest version before fewer led", "v2", []successorFacts{c("w1", "v2", 0, 1), c("w2", "v3", 40, 9)}, "w2"},
		{"natural version order: v1.10 after v1.9", "v1.9", []successorFacts{c("w1", "v1.9", 0, 1), c("w2", "v1.10", 5, 9)}, "w2"},
		{"a draining worker is passed over, however new", "v2", []successorFacts{drained, c("w1", "v2", 7, 9)}, "w1"},
		{"forward only: an older worker is passed over", "v2", []successorFacts{c("w1", "v1", 0, 1), c("w2", "v2", 9, 9)}, "w2"},
		{"only older workers: the best of them", "v2", []successorFacts{c("w1", "v1", 4, 1), c("w2", "v1", 3, 9)}, "w2"},
		{"an unversioned worker is not older", "v2", []successorFacts{c("w1", "v1", 0, 1), c("w2", "", 5, 9)}, "w2"},
		{"unversioned self: versions order the rest", "", []successorFacts{c("w1", "v1", 0, 1), c("w2", "v2", 5, 9)}, "w2"},
		{"a worker without a record: of unknown age, it is oldest", "v2", []successorFacts{c("w1", "v2", 0, 1), unknown}, "w9"},
		{"named a moment ago counts as led", "v2", []successorFacts{c("w1", "v2", 1+2, 1), c("w2", "v2", 2, 9)}, "w2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pickSuccessor("w0", tc.version, tc.cands); got != tc.want {
				t.Fatalf("pickSuccessor = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLighterIn(t *testing.T) {
	counts := map[string]int{"w0": 6, "w1": 4, "w2": 5}
	for _, tc := range []struct {
		name string
		line []string
		n    int
		want bool
	}{
		{"exactly n", []string{"w0", "w1"}, 4, true},
		{"one more than n", []string{"w0", "w2"}, 4, false},
		{"this worker is never lighter than itself", []string{"w0"}, 6, false},
		{"one that leads nothing", []string{"w0", "w2", "w7"}, 0, true},
		{"nobody else", nil, 9, false},
	} {
		if got := lighterIn("w0", tc.line, counts, tc.n); got != tc.want {
			t.Errorf("%s: lighterIn = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestStopReasonOf(t *testing.T) {
	for _, tc := range []struct {
		name              string
		draining, rollout bool
		version, newest   string
		want              string
	}{
		{"a plain stop", false, false, "v2", "v2", ReasonResign},
		{"draining", true, false, "v2", "v2", ReasonDrain},
		{"draining during a rollout, older", true, true, "v1", "v2", ReasonDrain},
		{"older during a rollout", false, true, "v1", "v2", ReasonRollout},
		{"newest during a rollout", false, true, "v2", "v2", ReasonResign},
		{"unversioned during a rollout", false, true, "", "v2", ReasonResign},
	} {
		if got := stopReasonOf(tc.draining, tc.rollout, tc.version, tc.newest); got != tc.want {
			t.Errorf("%s: stopReasonOf = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestChangeReason(t *testing.T) {
	for _, tc := range []struct {
		name    string
		prev    string
		h       hint
		ok      bool
		reason  string
		from    string
		counted bool
	}{
		{"the queue's first leader", "", hint{}, false, ReasonCrash, "", false},
		{"won back by this worker", "w0", hint{}, false, ReasonCrash, "w0", true},
		{"the previous leader left no hint", "w1", hint{}, false, ReasonCrash, "w1", true},
		{"the previous leader's hint", "w1", hint{From: "w1", To: "w0", Reason: ReasonShed}, true, ReasonShed, "w1", true},
		{"a hint of this worker's own is no explanation", "w1", hint{From: "w0", Reason: ReasonDrain}, true, ReasonCrash, "w1", true},
		{"first seen here, a hint explains it", "", hint{From: "w2", Reason: ReasonRollout}, true, ReasonRollout, "w2", true},
	} {
		reason, from, counted := changeReason("w0", tc.prev, tc.h, tc.ok)
		if reason != tc.reason || from != tc.from || counted != tc.counted {
			t.Errorf("%s: changeReason = %q, %q, %v; want %q, %q, %v", tc.name, reason, from, counted, tc.reason, tc.from, tc.counted)
		}
	}
}

func TestFairShareAndStanding(t *testing.T) {
	for _, tc := range []struct{ queues, workers, want int }{
		{10, 3, 4}, {9, 3, 3}, {10, 0, 10}, {1, 5, 1}, {0, 2, 0}, {10_000, 7, 1429},
	} {
		if got := fairShare(tc.queues, tc.workers); got != tc.want {
			t.Errorf("fairShare(%d, %d) = %d, want %d", tc.queues, tc.workers, got, tc.want)
		}
	}
	for _, tc := range []struct {
		led, fair int
		want      standing
	}{
		{3, 4, standing{vsFair: -1}},
		{4, 4, standing{vsFair: 0}},
		{5, 4, standing{vsFair: 1}},              // 5 = ceil(1.25 × 4) = 1.25 × 4: neither
		{6, 4, standing{1, true, true}},          // over both
		{4, 3, standing{vsFair: 1, above: true}}, // above 3.75 but within ceil's 4
		{2, 1, standing{vsFair: 1, above: true}}, // 2 on 2 workers
	} {
		if got := standingOf(tc.led, tc.fair, 1.25); got != tc.want {
			t.Errorf("standingOf(%d, %d) = %+v, want %+v", tc.led, tc.fair, got, tc.want)
		}
	}
}

package balance

import (
	"fmt"
	"testing"
	"time"
)

func TestCompareVersions(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"v1.10.0", "v1.9.2", 1},
		{"1.2.3", "v1.2.3", 0},
		{"2026.11.24", "2026.11.3", 1},
		{"v2", "v2.0.1", -1},
		{"v1.0.0-rc1", "v1.0.0-rc2", -1},
		{"007", "7", 0},
	} {
		if got := compareVersions(tc.a, tc.b); got != tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := compareVersions(tc.b, tc.a); got != -tc.want {
			t.Errorf("compareVersions(%q, %q) = %d, want %d", tc.b, tc.a, got, -tc.want)
		}
	}
	if olderThan("", "v2") || olderThan("v2", "") {
		t.Fatal("an unversioned worker is never older or newer")
	}
}

// A queue whose takeover is under way is never handed off, even by a draining worker; once the
// takeover is done it is.
func TestNoHandOffDuringTakeover(t *testing.T) {
	v := newView("/e/p/", "self", []string{"a"})
	v.apply("/e/p/a/1", "w1", 1, false)
	v.apply("/e/p/a/2", "w2", 2, false)
	r := &Runner{cfg: Config{Project: "p", ServerID: "w1", Queues: []string{"a"}, Version: "v1"}.WithDefaults(), view: v,
		records: map[string]*record{}, named: map[string][]time.Time{}}
	r.setHeldLocked("a", true, time.Now())
	r.roster = newRoster(Keys{ElectionPrefix: "/e"}, "p", "w1", "v1", 10*time.Second, r.log, v.poke, v.wake)
	r.roster.members["w2"] = member{Version: "v1"}
	r.roster.me.Draining = true
	done := r.TakingOver("a")
	if reason, _ := r.shouldShed("a"); reason != "" {
		t.Fatalf("shouldShed during a takeover = %q, want none", reason)
	}
	done()
	if reason, _ := r.shouldShed("a"); reason != ReasonDrain {
		t.Fatalf("shouldShed after the takeover = %q, want %q", reason, ReasonDrain)
	}
}

// A worker above its fair share sheds to a worker in line that leads two fewer only while it leads
// more than ShedAbove × fair share: 2 queues on 2 workers end 1 and 1, but 25, 25, 25, 25 and 0 over
// 100 queues (a stop-then-start deploy's end) stay so, where spreading would move 20 queues again.
func TestSmallFleetRule(t *testing.T) {
	for _, tc := range []struct {
		name   string
		queues int
		led    []int // queues led per worker; worker 0 is this one, the last stands in line everywhere
		want   string
	}{
		{"2 on 2", 2, []int{2, 0}, ReasonShed},
		{"within ShedAbove", 100, []int{25, 25, 25, 25, 0}, ""},
		{"above ShedAbove", 100, []int{26, 25, 25, 24, 0}, ReasonShed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var queues []string
			for i := range tc.queues {
				queues = append(queues, fmt.Sprintf("q%03d", i))
			}
			v := newView("/e/p/", "w0", queues)
			r := &Runner{cfg: Config{Project: "p", ServerID: "w0", Queues: queues}.WithDefaults(), view: v,
				records: map[string]*record{}, named: map[string][]time.Time{}}
			r.roster = newRoster(Keys{ElectionPrefix: "/e"}, "p", "w0", "", 10*time.Second, r.log, v.poke, v.wake)
			last := fmt.Sprintf("w%d", len(tc.led)-1)
			q := 0
			for w, n := range tc.led {
				id := fmt.Sprintf("w%d", w)
				r.roster.members[id] = member{}
				for range n {
					v.apply("/e/p/"+queues[q]+"/1", id, int64(2*q+1), false)
					v.apply("/e/p/"+queues[q]+"/2", last, int64(2*q+2), false)
					if w == 0 {
						r.setHeldLocked(queues[q], true, time.Now().Add(-time.Hour))
					}
					q++
				}
			}
			if reason, _ := r.shouldShed(queues[0]); reason != tc.want {
				t.Fatalf("shouldShed = %q, want %q", reason, tc.want)
			}
		})
	}
}

package balance

import (
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
	v := newView("/e/p/", []string{"a"})
	v.apply("/e/p/a/1", "w1", 1, false)
	v.apply("/e/p/a/2", "w2", 2, false)
	r := &Runner{cfg: Config{Project: "p", ServerID: "w1", Queues: []string{"a"}, Version: "v1"}.withDefaults(), view: v,
		held: map[string]bool{"a": true}, heldSince: map[string]time.Time{"a": time.Now()}, busy: map[string]int{},
		lastLeader: map[string]string{}, named: map[string][]time.Time{}}
	r.roster = newRoster("/e-balance/p/", "w1", "v1", 10*time.Second, r.log, v.poke)
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

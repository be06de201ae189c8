package balance

import (
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// The roster's picture follows the watch's events: member records and the version summary a rollout
// is judged by, hints (a deleted one kept as cleared, so a winner still learns why its queue moved),
// and keys of no kind it knows, which it ignores.
func TestRosterApply(t *testing.T) {
	fake := clock.NewFake(t0)
	k := Keys{ElectionPrefix: "/e"}
	r := newRoster(k, "p", "w0", "", 10*time.Second, zap.NewNop(), func() {}, func(string) {})
	r.clk = fake
	type want struct {
		woke     string // the queue apply returns
		versions int
		newest   string
		members  int
	}
	steps := []struct {
		name    string
		key     string
		value   string
		deleted bool
		want    want
	}{
		{"a member", k.Member("p", "w1"), `{"version":"v1.9","since":5}`, false, want{"", 1, "v1.9", 1}},
		{"a newer member, in natural order", k.Member("p", "w2"), `{"version":"v1.10","since":6}`, false, want{"", 2, "v1.10", 2}},
		{"an unversioned member", k.Member("p", "w3"), `{"since":7}`, false, want{"", 2, "v1.10", 3}},
		{"a member of the same version", k.Member("p", "w4"), `{"version":"v1.10"}`, false, want{"", 2, "v1.10", 4}},
		{"an unreadable record: as if gone", k.Member("p", "w2"), `{`, false, want{"", 2, "v1.10", 3}},
		{"the newest's twin goes", k.Member("p", "w4"), ``, true, want{"", 1, "v1.9", 2}},
		{"the last versioned one goes", k.Member("p", "w1"), ``, true, want{"", 0, "", 1}},
		{"a hint", k.Hint("p", "q1"), `{"to":"w3","from":"w0","reason":"shed"}`, false, want{"q1", 0, "", 1}},
		{"a transfer request", k.Transfer("p", "q2"), `{"to":"w3"}`, false, want{"q2", 0, "", 1}},
		{"another project's member", "/e-balance/other/m/w5", `{"version":"v9"}`, false, want{"", 0, "", 1}},
		{"a key of no kind", k.Project("p") + "x/y", `{}`, false, want{"", 0, "", 1}},
		{"a key without a name", k.Project("p") + "m", `{}`, false, want{"", 0, "", 1}},
	}
	for _, s := range steps {
		r.mu.Lock()
		woke := r.apply(s.key, []byte(s.value), s.deleted)
		got := want{woke, r.versions, r.newest, len(r.members)}
		r.mu.Unlock()
		if got != s.want {
			t.Fatalf("%s: %+v, want %+v", s.name, got, s.want)
		}
	}
	if on, newest := r.rollout(); on || newest != "" {
		t.Fatalf("rollout %v, newest %q; want none", on, newest)
	}
}

// A hint lives, on this worker's clock from when its watch brought it, for the reader's window (the
// deferral, the memory of why a queue moved): at the window's end still, a nanosecond later no more.
// Deleted, it defers nobody but still tells why the queue moved.
func TestRosterHintLife(t *testing.T) {
	fake := clock.NewFake(t0)
	k := Keys{ElectionPrefix: "/e"}
	r := newRoster(k, "p", "w0", "", 10*time.Second, zap.NewNop(), func() {}, func(string) {})
	r.clk = fake
	apply := func(value string, deleted bool) string {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.apply(k.Hint("p", "q1"), []byte(value), deleted)
	}
	const window = time.Second
	apply(`{"to":"w3","from":"w1","reason":"drain"}`, false)
	fake.Advance(window)
	if h, ok := r.hintFor("q1", window); !ok || h.To != "w3" || h.From != "w1" || h.Reason != ReasonDrain {
		t.Fatalf("at the window's end: %+v, %v; want w1's hint naming w3", h, ok)
	}
	fake.Advance(time.Nanosecond)
	if _, ok := r.hintFor("q1", window); ok {
		t.Fatal("after the window: the hint still defers")
	}
	if _, ok := r.recentHint("q1", window); ok {
		t.Fatal("after the window: the hint still explains")
	}
	apply(`{"to":"w3","from":"w1","reason":"drain"}`, false) // seen again: a fresh window
	if woke := apply(``, true); woke != "q1" {
		t.Fatalf("a cleared hint wakes %q, want q1", woke)
	}
	if _, ok := r.hintFor("q1", window); ok {
		t.Fatal("a cleared hint still defers")
	}
	if h, ok := r.recentHint("q1", window); !ok || !h.cleared || h.Reason != ReasonDrain {
		t.Fatalf("a cleared hint: %+v, %v; want it kept, cleared, to tell why the queue moved", h, ok)
	}
	if woke := apply(`garbage`, false); woke != "q1" {
		t.Fatalf("an unreadable hint wakes %q, want q1", woke)
	}
	if _, ok := r.recentHint("q1", window); ok {
		t.Fatal("an unreadable hint replaced by nothing still explains")
	}
}

// setDraining republishes the record only on a change, and says whether it changed.
func TestRosterSetDraining(t *testing.T) {
	r := newRoster(Keys{ElectionPrefix: "/e"}, "p", "w0", "v1", 10*time.Second, zap.NewNop(), func() {}, func(string) {})
	for _, s := range []struct {
		draining, changed, republish bool
	}{{false, false, false}, {true, true, true}, {true, false, false}, {false, true, true}} {
		changed := r.setDraining(s.draining)
		republish := false
		select {
		case <-r.republish:
			republish = true
		default:
		}
		if changed != s.changed || republish != s.republish || r.draining() != s.draining {
			t.Fatalf("setDraining(%v): changed %v, republish %v, draining %v; want %+v", s.draining, changed, republish, r.draining(), s)
		}
	}
}

// The records of a line come in its order, with known false for an ID without one.
func TestRosterWorkers(t *testing.T) {
	r := newRoster(Keys{ElectionPrefix: "/e"}, "p", "w0", "", 10*time.Second, zap.NewNop(), func() {}, func(string) {})
	r.members["w1"], r.members["w2"] = member{Version: "v1"}, member{Draining: true}
	got := r.workers([]string{"w2", "w9", "w1"})
	want := []worker{{"w2", member{Draining: true}, true}, {"w9", member{}, false}, {"w1", member{Version: "v1"}, true}}
	if len(got) != len(want) {
		t.Fatalf("workers %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("workers[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

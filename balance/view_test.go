package balance

import (
	"maps"
	"slices"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/baton-run/baton/clock"
)

// A queue's line is its candidates by key age (the oldest leads); leader counts follow each change of
// leader, whoever's keys come and go.
func TestViewLineAndCounts(t *testing.T) {
	v := newView("/e/p/", "w0", []string{"a", "b"})
	steps := []struct {
		name    string
		key, id string
		rev     int64
		deleted bool
		line    []string // of a
		counts  map[string]int
	}{
		{"w2 first", "/e/p/a/k2", "w2", 7, false, []string{"w2"}, map[string]int{"w2": 1}},
		{"w1 behind", "/e/p/a/k1", "w1", 9, false, []string{"w2", "w1"}, map[string]int{"w2": 1}},
		{"an older key of w3 (a read after a watch)", "/e/p/a/k3", "w3", 3, false, []string{"w3", "w2", "w1"}, map[string]int{"w3": 1}},
		{"w2 leads b", "/e/p/b/k2", "w2", 10, false, []string{"w3", "w2", "w1"}, map[string]int{"w3": 1, "w2": 1}},
		{"the leader goes", "/e/p/a/k3", "", 0, true, []string{"w2", "w1"}, map[string]int{"w2": 2}},
		{"one behind goes", "/e/p/a/k1", "", 0, true, []string{"w2"}, map[string]int{"w2": 2}},
		{"a second key of w2 in the same line", "/e/p/a/k4", "w2", 11, false, []string{"w2", "w2"}, map[string]int{"w2": 2}},
		{"a deleted key never seen", "/e/p/a/k9", "", 0, true, []string{"w2", "w2"}, map[string]int{"w2": 2}},
	}
	for _, s := range steps {
		v.apply(s.key, s.id, s.rev, s.deleted)
		if got := v.line("a"); !slices.Equal(got, s.line) {
			t.Fatalf("%s: line %v, want %v", s.name, got, s.line)
		}
		if got := v.leaderCounts(); !maps.Equal(got, s.counts) {
			t.Fatalf("%s: counts %v, want %v", s.name, got, s.counts)
		}
	}
	if got := v.workers(); got != 2 {
		t.Fatalf("workers %d, want 2 (w2, and w0 which stands nowhere)", got)
	}
	ids := v.candidateIDs()
	slices.Sort(ids)
	if !slices.Equal(ids, []string{"w2"}) {
		t.Fatalf("candidates %v, want w2", ids)
	}
}

// A read of every key replaces the picture: a worker whose keys are all gone is gone, and a queue
// counts as vacant from the read, or from when its last key went if that is later.
func TestViewLoadAndVacantSince(t *testing.T) {
	fake := clock.NewFake(t0)
	v := newView("/e/p/", "w0", []string{"a", "b"})
	v.clk = fake
	v.apply("/e/p/a/1", "w1", 1, false)
	v.apply("/e/p/b/2", "w2", 2, false)
	fake.Advance(time.Minute)
	v.load([]*mvccpb.KeyValue{{Key: []byte("/e/p/b/3"), Value: []byte("w3"), CreateRevision: 3}})
	if !v.isGone("w1") || !v.isGone("w2") || v.isGone("w3") {
		t.Fatalf("after a read without w1 and w2: gone %v", v.gone)
	}
	if v.leader("a") != "" || v.leader("b") != "w3" || v.workers() != 2 {
		t.Fatalf("after the read: leaders a=%q b=%q, workers %d", v.leader("a"), v.leader("b"), v.workers())
	}
	if got := v.vacantSince("a"); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("vacant since %v, want the read at %v", got, t0.Add(time.Minute))
	}
	fake.Advance(time.Minute)
	v.apply("/e/p/a/4", "w3", 4, false)
	fake.Advance(time.Minute)
	v.apply("/e/p/a/4", "", 0, true)
	if got := v.vacantSince("a"); !got.Equal(t0.Add(3 * time.Minute)) {
		t.Fatalf("vacant since %v, want when its last key went, %v", got, t0.Add(3*time.Minute))
	}
	if got := v.vacantSince("b"); !got.Equal(t0.Add(time.Minute)) {
		t.Fatalf("b, led all along: vacant since %v, want the read (it is not asked while led)", got)
	}
}

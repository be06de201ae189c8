package balance

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/election"
)

// The view reports each queue's leader as election.Observe would: the oldest candidate key first,
// then every change (a zero Leader when nobody stands), in order per queue, and nothing for a key that
// steps into line behind the leader.
func TestViewDeliversLeaderChanges(t *testing.T) {
	const prefix = "/baton/p/"
	v := newView(prefix, "w1", []string{"a", "b"})
	var mu sync.Mutex
	got := map[string][]election.Leader{}
	record := func(q string) func(election.Leader) {
		return func(l election.Leader) { mu.Lock(); got[q] = append(got[q], l); mu.Unlock() }
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { v.deliverLeaders(ctx, map[string]func(election.Leader){"a": record("a"), "b": record("b")}) })

	apply := func(key, id string, rev int64, deleted bool) {
		v.mu.Lock()
		v.apply(key, id, rev, deleted)
		v.mu.Unlock()
	}
	settled := func(want map[string][]election.Leader) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			mu.Lock()
			ok := len(got["a"]) == len(want["a"]) && len(got["b"]) == len(want["b"])
			snapshot := map[string][]election.Leader{"a": slices.Clone(got["a"]), "b": slices.Clone(got["b"])}
			mu.Unlock()
			if ok {
				for q := range want {
					if !slices.Equal(snapshot[q], want[q]) {
						t.Fatalf("queue %s: delivered %+v, want %+v", q, snapshot[q], want[q])
					}
				}
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("delivered %+v, want %+v", snapshot, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	// The first read: a leads w2 with w1 in line; nobody stands for b.
	v.mu.Lock()
	v.apply(prefix+"a/k2", "w2", 2, false)
	v.apply(prefix+"a/k5", "w1", 5, false)
	for q := range v.queues {
		v.leaderMayHaveChangedLocked(q)
	}
	v.mu.Unlock()
	w2 := election.Leader{ID: "w2", Token: 2, Key: prefix + "a/k2"}
	w1 := election.Leader{ID: "w1", Token: 5, Key: prefix + "a/k5"}
	want := map[string][]election.Leader{"a": {w2}, "b": {{}}}
	settled(want)

	apply(prefix+"a/k9", "w3", 9, false) // in line behind w2: no change of leader
	apply(prefix+"b/k7", "w3", 7, false)
	w3b := election.Leader{ID: "w3", Token: 7, Key: prefix + "b/k7"}
	want["b"] = append(want["b"], w3b)
	settled(want)

	apply(prefix+"a/k2", "w2", 2, true) // w2 goes: the next oldest, w1, leads
	want["a"] = append(want["a"], w1)
	settled(want)

	apply(prefix+"b/k7", "w3", 7, true) // nobody stands for b any more
	want["b"] = append(want["b"], election.Leader{})
	settled(want)

	apply("/baton/other/a/k1", "w9", 1, false) // another project's key
	apply(prefix+"c/k3", "w9", 3, false)       // a queue this worker does not serve
	apply(prefix+"a/k9", "w3", 9, true)        // in line, not the leader
	apply(prefix+"a/k5", "w1", 5, true)
	want["a"] = append(want["a"], election.Leader{})
	settled(want)
}

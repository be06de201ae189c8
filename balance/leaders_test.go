package balance

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/baton-run/baton/election"
)

// The view reports each queue's leader as election.Observe would: the oldest candidate key first,
// then every change (a zero Leader when nobody stands), in order per queue, and nothing for a key that
// steps into line behind the leader.
func TestViewDeliversLeaderChanges(t *testing.T) {
	const prefix = "/baton/p/"
	v := newView(prefix, "w1", []string{"a", "b"})
	got := map[string]chan election.Leader{"a": make(chan election.Leader, 16), "b": make(chan election.Leader, 16)}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		v.deliverLeaders(ctx, map[string]func(election.Leader){
			"a": func(l election.Leader) { got["a"] <- l },
			"b": func(l election.Leader) { got["b"] <- l },
		})
	})
	apply := func(key, id string, rev int64, deleted bool) {
		v.mu.Lock()
		v.apply(key, id, rev, deleted)
		v.mu.Unlock()
	}
	// expect receives the queue's next delivered leader; an extra or a missing call shows as a
	// mismatch or a timeout.
	expect := func(q string, want election.Leader) {
		t.Helper()
		select {
		case l := <-got[q]:
			if l != want {
				t.Fatalf("queue %s: delivered %+v, want %+v", q, l, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("queue %s: nothing delivered, want %+v", q, want)
		}
	}

	// The first read: a led by w2 with w1 in line; nobody stands for b.
	v.load([]*mvccpb.KeyValue{
		{Key: []byte(prefix + "a/k2"), Value: []byte("w2"), CreateRevision: 2},
		{Key: []byte(prefix + "a/k5"), Value: []byte("w1"), CreateRevision: 5},
	})
	expect("a", election.Leader{ID: "w2", Token: 2, Key: prefix + "a/k2"})
	expect("b", election.Leader{})

	apply(prefix+"a/k9", "w3", 9, false) // in line behind w2: no change of leader
	apply(prefix+"b/k7", "w3", 7, false)
	expect("b", election.Leader{ID: "w3", Token: 7, Key: prefix + "b/k7"})

	apply(prefix+"a/k2", "w2", 2, true) // w2 goes: the next oldest, w1, leads
	expect("a", election.Leader{ID: "w1", Token: 5, Key: prefix + "a/k5"})

	// A read again (a broken watch): b's only key went meanwhile, and a is unchanged.
	v.load([]*mvccpb.KeyValue{
		{Key: []byte(prefix + "a/k5"), Value: []byte("w1"), CreateRevision: 5},
		{Key: []byte(prefix + "a/k9"), Value: []byte("w3"), CreateRevision: 9},
	})
	expect("b", election.Leader{})

	apply("/baton/other/a/k1", "w9", 1, false) // another project's key
	apply(prefix+"c/k3", "w9", 3, false)       // a queue this worker does not serve
	apply(prefix+"a/k9", "w3", 9, true)        // in line, not the leader
	apply(prefix+"a/k5", "w1", 5, true)
	expect("a", election.Leader{})
}

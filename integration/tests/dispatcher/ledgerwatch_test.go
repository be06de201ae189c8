package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/ledger"
)

// A watch started before the puts sees every completion, twice for a key done twice, in order, and
// every key put; a key done before it started and another project whose name starts like this one's
// are not its business. WaitFor returns once it has seen a revision, and fails when ctx ends first.
func TestLedgerWatchSeesEveryCompletion(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cli := etcdx.Client(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("/ledgerwatch-test/%d", time.Now().UnixNano())
	if _, err := cli.Put(ctx, ledger.Key(prefix, project, "before"), "done w0 1"); err != nil {
		t.Fatal(err)
	}
	w, err := ledger.NewWatch(ctx, cli, prefix, project)
	if err != nil {
		t.Fatal(err)
	}
	defer follow(ctx, w)()
	var rev int64
	for _, kv := range [][2]string{{"a", "pending w1 5"}, {"a", "done w1 5"}, {"b", "pending w1 5"}, {"d", "done w1 5"}, {"d", "done w2 9"}, {"x/c", "done w1 5"}} {
		key := ledger.Key(prefix, project, kv[0])
		if kv[0] == "x/c" {
			key = ledger.Key(prefix, project+"x", "c") // another project that starts like this one
		}
		resp, err := cli.Put(ctx, key, kv[1])
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	if err := w.WaitFor(ctx, rev); err != nil {
		t.Fatal(err)
	}
	dones, touched := w.Seen()
	if len(dones) != 2 || len(dones["a"]) != 1 || len(dones["d"]) != 2 || dones["d"][1].Record != "done w2 9" || dones["d"][1].Rev <= dones["d"][0].Rev {
		t.Fatalf("completions %+v, want a once and d twice, in order", dones)
	}
	if len(touched) != 3 || !touched["a"] || !touched["b"] || !touched["d"] {
		t.Fatalf("touched %v, want a, b and d", touched)
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancelShort()
	if err := w.WaitFor(short, rev+1000); err == nil {
		t.Fatal("WaitFor for a revision nobody wrote returned nil")
	}
}

// ledger.NewWatchFrom replays the history etcd keeps: asked for revisions etcd compacted, it starts at
// the compaction (From says so) and sees every completion from there on, a key done twice included;
// asked from a revision etcd keeps, it starts there.
func TestLedgerWatchFromReplaysWhatEtcdKeeps(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cli := etcdx.Client(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("/ledgerwatch-test/%d", time.Now().UnixNano())
	put := func(k, v string) int64 {
		resp, err := cli.Put(ctx, ledger.Key(prefix, project, k), v)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	put("gone", "done w1 5")
	put("gone", "done w1 5") // done twice, but etcd will no longer know
	compactAt := put("a", "pending w1 5")
	if _, err := cli.Compact(ctx, compactAt); err != nil {
		t.Fatal(err)
	}
	put("a", "done w1 5")
	from := put("b", "done w1 5")
	rev := put("b", "done w2 9")
	replay := func(start int64) (*ledger.Watch, map[string][]ledger.Completion) {
		w, err := ledger.NewWatchFrom(ctx, cli, prefix, project, start)
		if err != nil {
			t.Fatal(err)
		}
		defer follow(ctx, w)()
		if err := w.WaitFor(ctx, rev); err != nil {
			t.Fatal(err)
		}
		dones, _ := w.Seen()
		return w, dones
	}
	w, dones := replay(0)
	if w.From() != compactAt || len(dones) != 2 || len(dones["a"]) != 1 || len(dones["b"]) != 2 {
		t.Fatalf("from the oldest: From %d, completions %+v; want From %d, a once and b twice", w.From(), dones, compactAt)
	}
	w, dones = replay(from)
	if w.From() != from || len(dones) != 1 || len(dones["b"]) != 2 {
		t.Fatalf("from %d: From %d, completions %+v; want b twice only", from, w.From(), dones)
	}
}

// follow runs w until the function it returns is called, which waits for it to return.
func follow(ctx context.Context, w *ledger.Watch) (stop func()) {
	wctx, cancel := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { w.Run(wctx); close(ran) }()
	return func() { cancel(); <-ran }
}

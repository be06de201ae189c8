package dispatcher_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/etcdtest"
)

// A watch started before the puts sees every completion, twice for a key done twice, in order, and
// every key put; a key done before it started and another prefix that starts like the ledger's are
// not its business. WaitFor returns once it has seen a revision, and fails when ctx ends first.
func TestLedgerWatchSeesEveryCompletion(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := etcdtest.Client(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("/ledgerwatch-test/%d", time.Now().UnixNano())
	if _, err := cli.Put(ctx, prefix+"/before", "done w0 1"); err != nil {
		t.Fatal(err)
	}
	w, err := dispatcher.NewLedgerWatch(ctx, cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { w.Run(wctx); close(ran) }()
	defer func() { stop(); <-ran }()
	var rev int64
	for _, kv := range [][2]string{{"a", "pending w1 5"}, {"a", "done w1 5"}, {"b", "pending w1 5"}, {"d", "done w1 5"}, {"d", "done w2 9"}, {"x/c", "done w1 5"}} {
		key := prefix + "/" + kv[0]
		if kv[0] == "x/c" {
			key = prefix + "x/c" // another prefix that starts like this one
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

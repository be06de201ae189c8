package ledgerwatch_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/ledgerwatch"
	"github.com/baton-run/baton/integration/testkit"
)

func TestMain(m *testing.M) { testkit.VerifyTestMain(m) }

// A watch started before the puts sees every completion, twice for a key done twice, and every key
// put; Read sees the records as they stand.
func TestWatchAndRead(t *testing.T) {
	c := etcdtest.Start(t, etcdtest.Options{})
	cli := etcdtest.Client(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	prefix := fmt.Sprintf("/ledgerwatch-test/%d", time.Now().UnixNano())
	if _, err := cli.Put(ctx, prefix+"/before", "done w0 1"); err != nil {
		t.Fatal(err)
	}
	w, err := ledgerwatch.New(ctx, cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { w.Run(wctx); close(ran) }()
	defer func() { stop(); <-ran }()
	for _, kv := range [][2]string{{"a", "pending w1 5"}, {"a", "done w1 5"}, {"b", "pending w1 5"}, {"d", "done w1 5"}, {"d", "done w2 9"}} {
		if _, err := cli.Put(ctx, prefix+"/"+kv[0], kv[1]); err != nil {
			t.Fatal(err)
		}
	}
	// Another prefix that starts like this one is not the ledger's.
	if _, err := cli.Put(ctx, prefix+"x/c", "done w1 5"); err != nil {
		t.Fatal(err)
	}
	states, rev, err := ledgerwatch.Read(ctx, cli, prefix)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]ledgerwatch.Record{"before": {State: "done", Raw: "done w0 1"}, "a": {State: "done", Raw: "done w1 5"},
		"b": {State: "pending", Raw: "pending w1 5"}, "d": {State: "done", Raw: "done w2 9"}}
	if fmt.Sprint(states) != fmt.Sprint(want) {
		t.Fatalf("Read: %v, want %v", states, want)
	}
	if err := w.WaitFor(ctx, rev, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	dones, touched := w.Seen()
	if len(dones) != 2 || len(dones["a"]) != 1 || len(dones["d"]) != 2 || dones["d"][1].Value != "done w2 9" || dones["d"][1].Rev <= dones["d"][0].Rev {
		t.Fatalf("dones %+v, want a once and d twice, in order", dones)
	}
	if len(touched) != 3 || !touched["a"] || !touched["b"] || !touched["d"] {
		t.Fatalf("touched %v, want a, b and d", touched)
	}
}

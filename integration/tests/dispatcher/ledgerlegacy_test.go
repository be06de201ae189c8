package dispatcher_test

import (
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// Records the release before per-project keys wrote (<prefix>/<dispatch key>) still count during the
// upgrade: a key done there is a duplicate, an older owner's pending one is taken over and completed
// in the project's own range (the old record is left as it is), a newer owner's pending one is
// refused; the readers (ledger.ReadRecord, ledger.Read) show them where the project has no record of
// its own. Nothing is written in the old layout. A ledger told not to read it (ledger.Config.IgnoreLegacy)
// begins such a key afresh.
func TestLedgerReadsTheLayoutBeforeProjects(t *testing.T) {
	e := newEnv(t)
	l := e.ledger(t)
	o, _ := e.ownerOf(t, "node-a")
	key := func(id string) string {
		return dispatcher.Request{Type: "legacy", TaskID: id, PayloadSHA256: fmt.Sprintf("%064x", 1)}.Key()
	}
	older := takeover.Owner{ServerID: "node-old", Token: o.Token - 1, ElectionKey: o.ElectionKey}
	newer := takeover.Owner{ServerID: "node-new", Token: o.Token + 1000, ElectionKey: o.ElectionKey + "-newer"}
	done, pending, ahead := key("done"), key("pending"), key("ahead")
	old := map[string]string{done: record("done", older), pending: record("pending", older), ahead: record("pending", newer)}
	for k, v := range old {
		if _, err := e.cli.Put(t.Context(), ledger.LegacyKey(ledgerPrefix, k), v); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.records(t); !maps.Equal(got, old) {
		t.Fatalf("ledger.Read before any write = %v, want the old records %v", got, old)
	}
	if rec, found, err := ledger.ReadRecord(t.Context(), e.cli, ledgerPrefix, project, done); err != nil || !found ||
		rec.State != ledger.Done || rec.ServerID != "node-old" {
		t.Fatalf("ledger.ReadRecord of an old done record = %+v, %v, %v", rec, found, err)
	}
	if isDone, err := l.Begin(t.Context(), done, o); err != nil || !isDone {
		t.Fatalf("Begin of a key done in the old layout = %v, %v; want a duplicate", isDone, err)
	}
	if _, err := l.Begin(t.Context(), ahead, o); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("Begin of a key a newer owner left pending in the old layout = %v, want ErrSuperseded", err)
	}
	if isDone, err := l.Begin(t.Context(), pending, o); err != nil || isDone {
		t.Fatalf("Begin of a key an older owner left pending in the old layout = %v, %v; want it taken over", isDone, err)
	}
	if err := l.Complete(t.Context(), pending, o); err != nil {
		t.Fatal(err)
	}
	want := maps.Clone(old)
	want[pending] = record("done", o)
	if got := e.records(t); !maps.Equal(got, want) {
		t.Fatalf("records %v, want %v (the project's own record before the old one)", got, want)
	}
	for k, v := range old {
		resp, err := e.cli.Get(t.Context(), ledger.LegacyKey(ledgerPrefix, k))
		if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != v {
			t.Fatalf("old record %s = %v, %v; want %q untouched", k, resp, err, v)
		}
	}
	if resp, err := e.cli.Get(t.Context(), ledger.Key(ledgerPrefix, project, done)); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("a duplicate wrote the project's record: %v, %v", resp, err)
	}

	fresh, err := ledger.New(e.cli, ledger.Config{Prefix: ledgerPrefix, Retention: time.Hour, IgnoreLegacy: true})
	if err != nil {
		t.Fatal(err)
	}
	if isDone, err := fresh.Begin(t.Context(), done, o); err != nil || isDone {
		t.Fatalf("Begin without reading the old layout = %v, %v; want the key begun", isDone, err)
	}
}

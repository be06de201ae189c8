package dispatcher_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// A superseded owner's Begin and Complete write nothing; the successor's go through.
func TestLedgerRefusesSupersededOwner(t *testing.T) {
	e := newEnv(t)
	l := e.ledger(t)
	a, termA := e.ownerOf(t, "node-a")
	if _, err := l.Begin(t.Context(), "k-pending", a); err != nil {
		t.Fatal(err)
	}
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, _ := e.ownerOf(t, "node-b")

	if _, err := l.Begin(t.Context(), "k-new", a); !errors.Is(err, dispatcher.ErrSuperseded) {
		t.Fatalf("Begin by a superseded owner = %v, want ErrSuperseded", err)
	}
	if err := l.Complete(t.Context(), "k-pending", a); !errors.Is(err, dispatcher.ErrSuperseded) {
		t.Fatalf("Complete by a superseded owner = %v, want ErrSuperseded", err)
	}
	want := map[string]string{"k-pending": record("pending", a)}
	if got := e.records(t); !maps.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	// The successor takes the pending record over and completes it.
	if done, err := l.Begin(t.Context(), "k-pending", b); err != nil || done {
		t.Fatalf("Begin by the successor = %v, %v", done, err)
	}
	if err := l.Complete(t.Context(), "k-pending", b); err != nil {
		t.Fatal(err)
	}
	if got := e.records(t)["k-pending"]; got != record("done", b) {
		t.Fatalf("record %q, want %q", got, record("done", b))
	}
}

// The exact-match lease of a record: done stays done, the owner's own pending record is kept (a
// retried attempt), a newer owner's pending record is refused.
func TestLedgerRecordStates(t *testing.T) {
	e := newEnv(t)
	l := e.ledger(t)
	o, _ := e.ownerOf(t, "node-a")
	newer := takeover.Owner{ServerID: "node-z", Token: o.Token + 1000, ElectionKey: o.ElectionKey + "-newer"}
	for k, v := range map[string]string{"done": record("done", newer), "newer": record("pending", newer)} {
		if _, err := e.cli.Put(t.Context(), ledgerPrefix+"/"+k, v); err != nil {
			t.Fatal(err)
		}
	}
	if done, err := l.Begin(t.Context(), "done", o); err != nil || !done {
		t.Fatalf("Begin of a done key = %v, %v; want a duplicate", done, err)
	}
	if _, err := l.Begin(t.Context(), "newer", o); !errors.Is(err, dispatcher.ErrSuperseded) {
		t.Fatalf("Begin of a newer owner's pending key = %v, want ErrSuperseded", err)
	}
	if err := l.Complete(t.Context(), "newer", o); !errors.Is(err, dispatcher.ErrSuperseded) {
		t.Fatalf("Complete of a newer owner's pending key = %v, want ErrSuperseded", err)
	}
	for range 2 {
		if done, err := l.Begin(t.Context(), "mine", o); err != nil || done {
			t.Fatalf("Begin of the owner's own key = %v, %v", done, err)
		}
	}
	for range 2 {
		if err := l.Complete(t.Context(), "mine", o); err != nil {
			t.Fatalf("Complete (again) = %v", err)
		}
	}
	want := map[string]string{"done": record("done", newer), "newer": record("pending", newer), "mine": record("done", o)}
	if got := e.records(t); !maps.Equal(got, want) {
		t.Fatalf("records %v, want %v", got, want)
	}
	if _, err := e.cli.Put(t.Context(), ledgerPrefix+"/garbage", "in-progress"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(t.Context(), "garbage", o); !errors.Is(err, dispatcher.ErrBadRecord) {
		t.Fatalf("Begin of an unreadable record = %v, want ErrBadRecord", err)
	}
}

// An owner that cannot be fenced fails closed, naming the field, and writes nothing.
func TestLedgerFailsClosedWithoutOwnerFields(t *testing.T) {
	e := newEnv(t)
	l := e.ledger(t)
	o, _ := e.ownerOf(t, "node-a")
	noKey, noToken := o, o
	noKey.ElectionKey, noToken.Token = "", 0
	for _, tc := range []struct {
		owner takeover.Owner
		field string
	}{{noKey, "election_key"}, {noToken, "token"}} {
		_, err := l.Begin(t.Context(), "k", tc.owner)
		if !errors.Is(err, dispatcher.ErrInvalidOwner) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Begin = %v, want ErrInvalidOwner naming %s", err, tc.field)
		}
		if err := l.Complete(t.Context(), "k", tc.owner); !errors.Is(err, dispatcher.ErrInvalidOwner) {
			t.Errorf("Complete = %v, want ErrInvalidOwner", err)
		}
		if err := dispatcher.ConfirmOwner(t.Context(), e.cli, tc.owner); !errors.Is(err, dispatcher.ErrInvalidOwner) {
			t.Errorf("ConfirmOwner = %v, want ErrInvalidOwner", err)
		}
		// An application's guarded write with such an owner is refused as well.
		resp, err := e.cli.Txn(t.Context()).If(dispatcher.OwnerCmp(tc.owner)).Then(clientv3.OpPut("/app/x", "1")).Commit()
		if err == nil && resp.Succeeded {
			t.Errorf("a write guarded by OwnerCmp(%s missing) was applied", tc.field)
		}
	}
	if got := e.records(t); len(got) != 0 {
		t.Fatalf("records %v, want none", got)
	}
}

// ConfirmOwner and OwnerCmp tell a live owner from a superseded one.
func TestConfirmOwner(t *testing.T) {
	e := newEnv(t)
	a, termA := e.ownerOf(t, "node-a")
	if err := dispatcher.ConfirmOwner(t.Context(), e.cli, a); err != nil {
		t.Fatalf("ConfirmOwner of the live owner = %v", err)
	}
	guardedPut := func(o takeover.Owner, k string) bool {
		t.Helper()
		resp, err := e.cli.Txn(t.Context()).If(dispatcher.OwnerCmp(o)).Then(clientv3.OpPut(k, o.ServerID)).Commit()
		if err != nil {
			t.Fatal(err)
		}
		return resp.Succeeded
	}
	if !guardedPut(a, "/app/a") {
		t.Fatal("the live owner's guarded write was refused")
	}
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, _ := e.ownerOf(t, "node-b")
	if err := dispatcher.ConfirmOwner(t.Context(), e.cli, a); !errors.Is(err, dispatcher.ErrSuperseded) {
		t.Fatalf("ConfirmOwner of the superseded owner = %v, want ErrSuperseded", err)
	}
	if err := dispatcher.ConfirmOwner(t.Context(), e.cli, b); err != nil {
		t.Fatalf("ConfirmOwner of the successor = %v", err)
	}
	if guardedPut(a, "/app/a2") || !guardedPut(b, "/app/b") {
		t.Fatal("OwnerCmp let the superseded owner write, or refused the successor")
	}
	// A later key with the same name (a new candidate after the old one was deleted) is another term.
	if _, err := e.cli.Put(t.Context(), a.ElectionKey, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := dispatcher.ConfirmOwner(t.Context(), e.cli, a); !errors.Is(err, dispatcher.ErrSuperseded) {
		t.Fatalf("ConfirmOwner with the key re-created = %v, want ErrSuperseded", err)
	}
}

package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/ledger"
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

	if _, err := l.Begin(t.Context(), "k-new", a); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("Begin by a superseded owner = %v, want ErrSuperseded", err)
	}
	if err := l.Complete(t.Context(), "k-pending", a); !errors.Is(err, ledger.ErrSuperseded) {
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
		if _, err := e.cli.Put(t.Context(), ledger.Key(ledgerPrefix, project, k), v); err != nil {
			t.Fatal(err)
		}
	}
	if done, err := l.Begin(t.Context(), "done", o); err != nil || !done {
		t.Fatalf("Begin of a done key = %v, %v; want a duplicate", done, err)
	}
	if _, err := l.Begin(t.Context(), "newer", o); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("Begin of a newer owner's pending key = %v, want ErrSuperseded", err)
	}
	if err := l.Complete(t.Context(), "newer", o); !errors.Is(err, ledger.ErrSuperseded) {
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
	if _, err := e.cli.Put(t.Context(), ledger.Key(ledgerPrefix, project, "garbage"), "in-progress"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(t.Context(), "garbage", o); !errors.Is(err, ledger.ErrBadRecord) {
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
		if !errors.Is(err, ledger.ErrInvalidOwner) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Begin = %v, want ErrInvalidOwner naming %s", err, tc.field)
		}
		if err := l.Complete(t.Context(), "k", tc.owner); !errors.Is(err, ledger.ErrInvalidOwner) {
			t.Errorf("Complete = %v, want ErrInvalidOwner", err)
		}
		if err := ledger.ConfirmOwner(t.Context(), e.cli, tc.owner); !errors.Is(err, ledger.ErrInvalidOwner) {
			t.Errorf("ConfirmOwner = %v, want ErrInvalidOwner", err)
		}
		// An application's guarded write with such an owner is refused as well.
		resp, err := e.cli.Txn(t.Context()).If(ledger.OwnerCmp(tc.owner)).Then(clientv3.OpPut("/app/x", "1")).Commit()
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
	if err := ledger.ConfirmOwner(t.Context(), e.cli, a); err != nil {
		t.Fatalf("ConfirmOwner of the live owner = %v", err)
	}
	guardedPut := func(o takeover.Owner, k string) bool {
		t.Helper()
		resp, err := e.cli.Txn(t.Context()).If(ledger.OwnerCmp(o)).Then(clientv3.OpPut(k, o.ServerID)).Commit()
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
	if err := ledger.ConfirmOwner(t.Context(), e.cli, a); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("ConfirmOwner of the superseded owner = %v, want ErrSuperseded", err)
	}
	if err := ledger.ConfirmOwner(t.Context(), e.cli, b); err != nil {
		t.Fatalf("ConfirmOwner of the successor = %v", err)
	}
	if guardedPut(a, "/app/a2") || !guardedPut(b, "/app/b") {
		t.Fatal("OwnerCmp let the superseded owner write, or refused the successor")
	}
	// A later key with the same name (a new candidate after the old one was deleted) is another term.
	if _, err := e.cli.Put(t.Context(), a.ElectionKey, "node-a"); err != nil {
		t.Fatal(err)
	}
	if err := ledger.ConfirmOwner(t.Context(), e.cli, a); !errors.Is(err, ledger.ErrSuperseded) {
		t.Fatalf("ConfirmOwner with the key re-created = %v, want ErrSuperseded", err)
	}
}

// A ledger whose lease is gone (an etcd restored from an older snapshot, a move to a new cluster;
// modelled by revoking it) grants a new one at once: the next Begin and Complete go through instead
// of failing "requested lease not found" until the lease would have been rotated (retention/2, 12 h
// by default). Readiness (Check) stays green: nothing was left failing.
func TestLedgerRegrantsALostLease(t *testing.T) {
	e := newEnv(t)
	l := e.ledger(t)
	o, _ := e.ownerOf(t, "node-a")
	if _, err := l.Begin(t.Context(), "before", o); err != nil {
		t.Fatal(err)
	}
	resp, err := e.cli.Get(t.Context(), ledger.Key(ledgerPrefix, project, "before"))
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("record before the loss: %v, %v", resp, err)
	}
	if _, err := e.cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"after-1", "after-2"} {
		if done, err := l.Begin(t.Context(), k, o); err != nil || done {
			t.Fatalf("Begin %s after the lease was lost = %v, %v; want a new lease and the record written", k, done, err)
		}
		if err := l.Complete(t.Context(), k, o); err != nil {
			t.Fatalf("Complete %s after the lease was lost: %v", k, err)
		}
	}
	recs := e.records(t)
	for _, k := range []string{"after-1", "after-2"} {
		if recs[k] != record("done", o) {
			t.Errorf("record %s = %q, want done by node-a", k, recs[k])
		}
	}
	got, err := e.cli.Get(t.Context(), ledger.Key(ledgerPrefix, project, "after-1"))
	if err != nil || len(got.Kvs) != 1 {
		t.Fatalf("record after-1: %v, %v", got, err)
	}
	if lease := got.Kvs[0].Lease; lease == 0 || lease == resp.Kvs[0].Lease {
		t.Errorf("record after-1 on lease %x, want a new lease (the lost one was %x)", lease, resp.Kvs[0].Lease)
	}
	if err := l.Check(); err != nil {
		t.Errorf("Check after the ledger healed = %v, want nil", err)
	}
}

// A ledger whose writes keep failing says so in Check, naming ledger.ErrUnavailable, once the streak
// is ledger.FailingAfter old; the first write that goes through clears it.
func TestLedgerCheckReportsFailingWrites(t *testing.T) {
	e := newEnv(t)
	o, _ := e.ownerOf(t, "node-a")
	proxy := etcdx.NewTestProxy(t, e.etcd.MemberEndpoint(0))
	cli := etcdx.Client(t, e.etcd, proxy.URL())
	l, err := ledger.New(cli, ledger.Config{Prefix: ledgerPrefix, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Begin(t.Context(), "k", o); err != nil {
		t.Fatal(err)
	}
	proxy.Blackhole()
	harness.Eventually(t, time.Minute, "Check reports the failing writes", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
		defer cancel()
		if _, err := l.Begin(ctx, "k2", o); err == nil {
			return fmt.Errorf("Begin went through a blackholed proxy")
		}
		if err := l.Check(); !errors.Is(err, ledger.ErrUnavailable) {
			return fmt.Errorf("Check = %v", err)
		}
		return nil
	})
	proxy.Heal()
	harness.Eventually(t, time.Minute, "a write goes through again", func() error {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := l.Begin(ctx, "k2", o)
		return err
	})
	if err := l.Check(); err != nil {
		t.Fatalf("Check after a write went through = %v, want nil", err)
	}
}

// cutResponses applies the next n Txn requests at etcd and then answers the client Unavailable, as a
// connection that broke after the server applied the request but before its response arrived.
type cutResponses struct {
	mu    sync.Mutex
	n     int
	state string   // cut only Txns that write a record of this state ("" for any)
	cut   []string // the Txns applied whose response was cut, in order
}

func (c *cutResponses) arm(n int, state string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n, c.state = n, state
}

// writes reports whether a Txn puts a ledger record of state.
func writes(req any, state string) bool {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return false
	}
	for _, op := range txn.GetSuccess() {
		if strings.HasPrefix(string(op.GetRequestPut().GetValue()), state+" ") {
			return true
		}
	}
	return false
}

func (c *cutResponses) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	if _, txn := req.(*etcdserverpb.TxnRequest); !txn || err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 || (c.state != "" && !writes(req, c.state)) {
		return nil
	}
	c.n--
	c.cut = append(c.cut, method)
	return status.Error(codes.Unavailable, "response cut after the server applied the request")
}

// Every ledger write is harmless when it is applied twice: the commit reaches etcd, the client
// sees Unavailable and the write is sent again (by the etcd client's own retry or by the caller:
// the activity's next attempt). Begin, the takeover of an older owner's pending record and Complete
// each end in the state one application would leave, and the Dispatch activity retried after a cut
// response calls the handler once.
func TestLedgerWritesAppliedTwice(t *testing.T) {
	e := newEnv(t)
	cut := &cutResponses{}
	l := e.ledgerThrough(t, cut.intercept)
	old, termOld := e.ownerOf(t, "node-old")
	if _, err := l.Begin(t.Context(), "taken-over", old); err != nil {
		t.Fatal(err)
	}
	if err := termOld.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	o, _ := e.ownerOf(t, "node-a")

	// sendTwice makes the first application's response disappear, then sends the write again as a
	// caller that saw the error would.
	sendTwice := func(what string, write func() error) {
		t.Helper()
		cut.arm(1, "")
		first := write()
		if n := len(cut.cut); n == 0 {
			t.Fatalf("%s: no response was cut", what)
		}
		cut.cut = nil
		if first == nil {
			return // the etcd client sent it again itself and reported the second outcome
		}
		if err := write(); err != nil {
			t.Fatalf("%s sent again after its response was cut (%v): %v", what, first, err)
		}
	}
	for _, k := range []string{"new", "taken-over"} {
		sendTwice("Begin "+k, func() error {
			done, err := l.Begin(t.Context(), k, o)
			if err == nil && done {
				return fmt.Errorf("Begin reported %s done", k)
			}
			return err
		})
		if got := e.records(t)[k]; got != record("pending", o) {
			t.Fatalf("record %s after Begin applied twice = %q, want pending for node-a", k, got)
		}
		sendTwice("Complete "+k, func() error { return l.Complete(t.Context(), k, o) })
		if got := e.records(t)[k]; got != record("done", o) {
			t.Fatalf("record %s after Complete applied twice = %q, want done by node-a", k, got)
		}
	}

	// The activity, attempt after attempt as Temporal retries it: a cut Begin fails an attempt
	// before the handler, a cut Complete after it. The handler runs once either way.
	for _, state := range []string{ledger.Pending, ledger.Done} {
		h := &handled{}
		acts := &dispatcher.Activities{Ledger: l, Handler: h.handle}
		req := request("cut-" + state)
		task := dispatcher.Task{Key: req.Key(), Request: req, Owner: o}
		cut.arm(1, state)
		var errs []error
		for len(errs) < 3 {
			_, err := acts.Dispatch(t.Context(), task)
			if err == nil {
				break
			}
			errs = append(errs, err)
		}
		if len(cut.cut) != 1 || len(errs) == 3 {
			t.Fatalf("cut %s write: %d responses cut, attempts failed with %v", state, len(cut.cut), errs)
		}
		cut.cut = nil
		if n := h.perKey()[req.Key()]; n != 1 {
			t.Fatalf("cut %s write: handler ran %d times, want once (failed attempts: %v)", state, n, errs)
		}
		if got := e.records(t)[req.Key()]; got != record("done", o) {
			t.Fatalf("cut %s write: record = %q, want done by node-a", state, got)
		}
	}
}

// An attempt holds its key while its handler runs: no other attempt begins it, not a successor's
// and not a retry of the same owner, until the attempt releases it (its handler returned) or its
// claim lapses with its process (modelled by revoking the claim's lease, as its expiry would). A key
// done meanwhile is a duplicate for everyone, claim or not.
func TestLedgerAttemptHoldsItsKey(t *testing.T) {
	e := newEnv(t)
	l := e.ledger(t)
	a, termA := e.ownerOf(t, "node-a")
	done, release, err := l.BeginHolding(t.Context(), "held", a)
	if err != nil || done {
		t.Fatalf("BeginHolding = %v, %v", done, err)
	}
	claim := ledger.AttemptKey(ledgerPrefix, project, "held")
	resp, err := e.cli.Get(t.Context(), claim)
	if err != nil || len(resp.Kvs) != 1 || resp.Kvs[0].Lease == 0 {
		t.Fatalf("claim %s: %v, %v; want one key on a lease", claim, resp, err)
	}
	lease := clientv3.LeaseID(resp.Kvs[0].Lease)
	// A second attempt waits for the claim to go; one whose context ends first gets ErrAttemptInFlight.
	short, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	if _, _, err := l.BeginHolding(short, "held", a); !errors.Is(err, ledger.ErrAttemptInFlight) {
		t.Fatalf("a second attempt of the same owner = %v, want ErrAttemptInFlight", err)
	}
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	b, termB := e.ownerOf(t, "node-b")
	if _, err := l.Begin(t.Context(), "held", b); !errors.Is(err, ledger.ErrAttemptInFlight) {
		t.Fatalf("the successor's Begin while node-a's handler runs = %v, want ErrAttemptInFlight", err)
	}
	if got := e.records(t)["held"]; got != record("pending", a) {
		t.Fatalf("record %q, want node-a's pending one untouched", got)
	}
	// The successor's attempt waits for node-a's handler, and begins the moment it returned.
	type begun struct {
		done    bool
		release func()
		err     error
	}
	waiting := make(chan begun, 1)
	go func() {
		done, release, err := l.BeginHolding(t.Context(), "held", b)
		waiting <- begun{done, release, err}
	}()
	select {
	case r := <-waiting:
		t.Fatalf("the successor's BeginHolding returned (%v, %v) while node-a's handler still runs", r.done, r.err)
	case <-time.After(time.Second):
	}
	release()
	release() // once only
	r := <-waiting
	doneB, releaseB, err := r.done, r.release, r.err
	if err != nil || doneB {
		t.Fatalf("the successor's Begin once node-a's attempt ended = %v, %v", doneB, err)
	}
	// node-b's process dies with its handler running: its term ends, and its claim lapses with its lease.
	if err := termB.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	resp, err = e.cli.Get(t.Context(), claim)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("node-b's claim: %v, %v", resp, err)
	}
	if _, err := e.cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
	c, _ := e.ownerOf(t, "node-c")
	if done, err := l.Begin(t.Context(), "held", c); err != nil || done {
		t.Fatalf("Begin once node-b's claim lapsed = %v, %v", done, err)
	}
	if err := l.Complete(t.Context(), "held", c); err != nil {
		t.Fatal(err)
	}
	releaseB()
	// A done key is a duplicate, whatever claims exist.
	if done, _, err := l.BeginHolding(t.Context(), "held", c); err != nil || !done {
		t.Fatalf("BeginHolding of a done key = %v, %v; want a duplicate", done, err)
	}
	if ttl, err := e.cli.TimeToLive(t.Context(), lease); err != nil || ttl.TTL > 0 {
		t.Errorf("node-a's claim lease still lives after release (%+v, %v)", ttl, err)
	}
	if got := e.records(t); !maps.Equal(got, map[string]string{"held": record("done", c)}) {
		t.Errorf("records %v: the claims must not read as records", got)
	}
}

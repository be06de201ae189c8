package dispatcher_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/baton-run/baton/ledger"
)

// grantMethod is the gRPC method of an etcd lease grant.
const grantMethod = "/etcdserverpb.Lease/LeaseGrant"

// holdGrant holds the first lease grant its client sends until release is closed (or the call's
// context ends); the grants after it go through. held is closed once the first grant is being held.
type holdGrant struct {
	mu      sync.Mutex
	grants  int
	held    chan struct{}
	release chan struct{}
}

func newHoldGrant() *holdGrant {
	return &holdGrant{held: make(chan struct{}), release: make(chan struct{})}
}

func (h *holdGrant) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == grantMethod {
		h.mu.Lock()
		h.grants++
		first := h.grants == 1
		h.mu.Unlock()
		if first {
			close(h.held) // first is true once
			select {
			case <-h.release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// count is how many grants the client has sent.
func (h *holdGrant) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.grants
}

// ledgerHolding returns a ledger over a client of its own whose lease grants pass through h.
func (e *env) ledgerHolding(t *testing.T, h *holdGrant) *ledger.Etcd {
	t.Helper()
	return e.ledgerThrough(t, h.intercept)
}

// ledgerThrough returns a ledger over a client of its own whose unary calls pass through intercept.
func (e *env) ledgerThrough(t *testing.T, intercept grpc.UnaryClientInterceptor) *ledger.Etcd {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	l, err := ledger.New(cli, ledger.Config{Prefix: ledgerPrefix, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// stillHeld bounds how long a caller with a short deadline may take to give up while the grant is
// held: generous, since the point is only that it returns before the grant is released.
const stillHeld = 30 * time.Second

// One slow lease grant does not stall the worker's other ledger writes past their deadlines: while
// the first Begin's grant is held, a Begin and a Complete with short deadlines return their
// context's error before the grant is released, and write nothing; once it is released, the first
// Begin and the writes after it go through on the one lease granted.
func TestLedgerCallerDeadlineWhileLeaseGrantHeld(t *testing.T) {
	e := newEnv(t)
	h := newHoldGrant()
	l := e.ledgerHolding(t, h)
	o, _ := e.ownerOf(t, "node-a")

	first := make(chan error, 1)
	go func() {
		_, err := l.Begin(t.Context(), "first", o)
		first <- err
	}()
	<-h.held
	calls := map[string]func(context.Context) error{
		"Begin":    func(ctx context.Context) error { _, err := l.Begin(ctx, "second", o); return err },
		"Complete": func(ctx context.Context) error { return l.Complete(ctx, "first", o) },
	}
	for name, call := range calls {
		out := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
			defer cancel()
			out <- call(ctx)
		}()
		select {
		case err := <-out:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("%s while the lease grant is held = %v, want its context's DeadlineExceeded", name, err)
			}
		case <-time.After(stillHeld):
			close(h.release)
			t.Fatalf("%s with a 200ms deadline did not return while the lease grant was held (%v)", name, stillHeld)
		}
	}
	if got := e.records(t); len(got) != 0 {
		t.Errorf("records while the lease grant is held: %v, want none", got)
	}
	select {
	case err := <-first:
		t.Fatalf("the first Begin returned (%v) while its lease grant was held", err)
	default:
	}

	close(h.release)
	if err := <-first; err != nil {
		t.Fatalf("the first Begin after its grant was released: %v", err)
	}
	if done, err := l.Begin(t.Context(), "second", o); err != nil || done {
		t.Fatalf("Begin second after the grant was released = %v, %v", done, err)
	}
	if err := l.Complete(t.Context(), "first", o); err != nil {
		t.Fatalf("Complete first after the grant was released: %v", err)
	}
	want := map[string]string{"first": record("done", o), "second": record("pending", o)}
	for k, v := range want {
		if got := e.records(t)[k]; got != v {
			t.Errorf("record %s = %q, want %q", k, got, v)
		}
	}
	if n := h.count(); n != 1 {
		t.Errorf("%d lease grants, want 1: the callers share the lease the first one granted", n)
	}
}

// A grant whose caller gives up lets the next caller grant: the first Begin's grant is held and its
// context cancelled; a second Begin waiting meanwhile (with no deadline of its own) grants a lease
// itself and writes its record.
func TestLedgerCancelledGrantLetsTheNextCallerGrant(t *testing.T) {
	e := newEnv(t)
	h := newHoldGrant()
	defer close(h.release)
	l := e.ledgerHolding(t, h)
	o, _ := e.ownerOf(t, "node-a")

	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() {
		_, err := l.Begin(ctx, "first", o)
		first <- err
	}()
	<-h.held
	second := make(chan error, 1)
	go func() {
		_, err := l.Begin(t.Context(), "second", o)
		second <- err
	}()
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the first Begin after its context was cancelled = %v, want context.Canceled", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the second Begin after the first caller gave up its grant: %v", err)
	}
	got := e.records(t)
	if got["second"] != record("pending", o) || got["first"] != "" {
		t.Errorf("records %v, want only second pending", got)
	}
}

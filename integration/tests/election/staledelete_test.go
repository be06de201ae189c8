package election_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// lateDelete plants the fault of issue #42's simulator run on one etcd client: the first campaign
// transaction that puts a key fails with Unavailable, after etcd applied it (applied) or without
// sending it (dropped, as the simulator's seed 0x408 did), and the next transaction that deletes a
// key is held (its caller sees the answer lost) until deliver sends it to etcd.
type lateDelete struct {
	applied bool

	mu     sync.Mutex
	cut    bool // the first put failed
	next   bool // a later put was sent: the failed campaign is over
	held   func() (*etcdserverpb.TxnResponse, error)
	isHeld chan struct{}
}

func newLateDelete(applied bool) *lateDelete {
	return &lateDelete{applied: applied, isHeld: make(chan struct{})}
}

func (l *lateDelete) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	txn, ok := req.(*etcdserverpb.TxnRequest)
	if !ok {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case txnDoes(txn, func(op *etcdserverpb.RequestOp) bool { return op.GetRequestPut() != nil }):
		if l.cut {
			l.next = true
			break
		}
		l.cut = true
		if !l.applied {
			return status.Error(codes.Unavailable, "put dropped before etcd applied it")
		}
		if err := invoker(ctx, method, req, reply, cc, opts...); err != nil {
			return err
		}
		return status.Error(codes.Unavailable, "response cut after the server applied the put")
	case l.cut && !l.next && l.held == nil && txnDoes(txn, func(op *etcdserverpb.RequestOp) bool { return op.GetRequestDeleteRange() != nil }):
		late := context.WithoutCancel(ctx)
		l.held = func() (*etcdserverpb.TxnResponse, error) {
			resp := new(etcdserverpb.TxnResponse)
			return resp, invoker(late, method, req, resp, cc, opts...)
		}
		close(l.isHeld)
		return status.Error(codes.Unavailable, "delete held in flight")
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// deliver sends the held delete to etcd now and returns etcd's answer, or nil when none is held.
func (l *lateDelete) deliver(t *testing.T) *etcdserverpb.TxnResponse {
	t.Helper()
	l.mu.Lock()
	send := l.held
	l.mu.Unlock()
	if send == nil {
		return nil
	}
	resp, err := send()
	if err != nil {
		t.Fatalf("late delete: %v", err)
	}
	return resp
}

func txnDoes(txn *etcdserverpb.TxnRequest, is func(*etcdserverpb.RequestOp) bool) bool {
	for _, op := range txn.GetSuccess() {
		if is(op) {
			return true
		}
	}
	return false
}

// A campaign whose put was applied but whose answer was lost deletes the key it may have left. When
// that delete is delayed in flight until after the next campaign of the same session put its key
// again (same lease, same key name), it must not remove the newer key: that would let etcd elect a
// successor while this process's term, and its leader callback, still run (issue #42's simulator
// violation). The delete must name the attempt's key, not only the lease.
func TestLateDeleteOfAFailedCampaignSparesTheNextTerm(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	for _, applied := range []bool{true, false} {
		t.Run(fmt.Sprintf("put applied=%v", applied), func(t *testing.T) {
			lateDeleteSparesTheNextTerm(t, c, applied)
		})
	}
}

func lateDeleteSparesTheNextTerm(t *testing.T, c *etcdx.Cluster, applied bool) {
	operator := etcdx.Client(t, c)
	fault := newLateDelete(applied)
	cli, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialTimeout: 5 * time.Second,
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(fault.intercept)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	a, err := election.New(cli, election.Config{Logger: zaptest.NewLogger(t).Named("node-a")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		if err := a.Close(ctx); err != nil {
			t.Errorf("node-a: close: %v", err)
		}
	})
	b := newCandidate(t, c, "node-b", election.Config{})
	queue := fmt.Sprintf("late-delete-%v", applied)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	if term, err := a.Campaign(ctx, project, queue, "node-a"); err == nil {
		t.Fatalf("first campaign won (token %d); the planted cut did not fail it", term.Token())
	}
	select {
	case <-fault.isHeld:
	default:
		if applied {
			// The put was applied: its key must go before anything else may lead.
			t.Fatal("the failed campaign sent no delete of its key")
		}
	}
	term, err := a.Campaign(ctx, project, queue, "node-a")
	if err != nil {
		t.Fatalf("second campaign: %v", err)
	}
	won := make(chan *election.Term, 1)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		if bt, err := b.el.Campaign(ctx, project, queue, b.id); err == nil {
			won <- bt
		}
	})
	waitCandidates(t, operator, a.ElectionKey(project, queue), 2, 20*time.Second)

	fault.deliver(t)
	got, err := operator.Get(ctx, term.Key())
	if err != nil {
		t.Fatal(err)
	}
	if !election.HeldIn(got.Kvs, term.Token()) {
		t.Fatalf("the late delete of the failed campaign removed the key of the live term %d: etcd elects node-b while node-a still leads",
			term.Token())
	}
	select {
	case bt := <-won:
		t.Fatalf("node-b elected (token %d) while node-a's term %d holds", bt.Token(), term.Token())
	default:
	}
	if err := term.Check(); err != nil {
		t.Fatalf("node-a's term ended by the late delete: %v", err)
	}

	// The queue still hands over: node-a resigns and node-b wins.
	if err := term.Resign(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case bt := <-won:
		if bt.Token() <= term.Token() {
			t.Fatalf("node-b's token %d does not follow node-a's %d", bt.Token(), term.Token())
		}
	case <-ctx.Done():
		t.Fatal("node-b not elected after node-a resigned")
	}
}

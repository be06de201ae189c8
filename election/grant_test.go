package election

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
)

// gatedLease counts session grants and answers each with what the test sends on answer; keepalives
// wait for their context (the test ends before the first one is due).
type gatedLease struct {
	mu     sync.Mutex
	grants int
	answer chan error
}

func (l *gatedLease) Grant(ctx context.Context, ttl int64) (*clientv3.LeaseGrantResponse, error) {
	l.mu.Lock()
	l.grants++
	id := clientv3.LeaseID(100 + l.grants)
	l.mu.Unlock()
	select {
	case err := <-l.answer:
		if err != nil {
			return nil, err
		}
		return &clientv3.LeaseGrantResponse{ID: id, TTL: ttl}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (l *gatedLease) KeepAliveOnce(ctx context.Context, _ clientv3.LeaseID) (*clientv3.LeaseKeepAliveResponse, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

func (l *gatedLease) Revoke(context.Context, clientv3.LeaseID) (*clientv3.LeaseRevokeResponse, error) {
	return &clientv3.LeaseRevokeResponse{}, nil
}

func (l *gatedLease) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.grants
}

// Every campaign that needs a session waits for one grant and shares its outcome: a failed grant
// fails them all at once (each backs off on it), instead of each sending a grant of its own after
// the one before failed, one after another, as many as there are queues. A caller that gives up
// stops waiting without failing the grant for the others.
func TestCampaignsShareOneSessionGrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		lease := &gatedLease{answer: make(chan error)}
		e, err := New(clientv3.NewCtxClient(t.Context()), Config{Clock: clock.Real()})
		if err != nil {
			t.Fatal(err)
		}
		e.leases = lease
		const n = 5
		errs := make(chan error, n)
		for range n {
			go func() {
				_, err := e.session(t.Context())
				errs <- err
			}()
		}
		synctest.Wait()
		if g := lease.count(); g != 1 {
			t.Fatalf("%d callers without a session sent %d grants at once, want 1", n, g)
		}
		refused := errors.New("etcdserver: too many requests")
		lease.answer <- refused
		synctest.Wait()
		if g := lease.count(); g != 1 {
			t.Fatalf("after the one grant failed, %d grants were sent (one more per waiting caller), want 1", g)
		}
		for range n {
			if err := <-errs; !errors.Is(err, refused) {
				t.Fatalf("a caller waiting for the failed grant got %v, want the grant's error", err)
			}
		}

		gaveUp, cancel := context.WithCancel(t.Context())
		go func() {
			_, err := e.session(gaveUp)
			errs <- err
		}()
		sessions := make(chan *session, n)
		for range n - 1 {
			go func() {
				s, err := e.session(t.Context())
				if err != nil {
					t.Errorf("session: %v", err)
				}
				sessions <- s
			}()
		}
		synctest.Wait()
		cancel()
		if err := <-errs; !errors.Is(err, context.Canceled) {
			t.Fatalf("the caller that gave up got %v, want context.Canceled", err)
		}
		lease.answer <- nil
		first := <-sessions
		for range n - 2 {
			if s := <-sessions; s != first || s == nil {
				t.Fatalf("callers waiting for one grant got different sessions: %p and %p", first, s)
			}
		}
		if s, err := e.session(t.Context()); err != nil || s != first {
			t.Fatalf("a caller after the grant got %p, %v; want the granted session %p", s, err, first)
		}
		if g := lease.count(); g != 2 {
			t.Fatalf("%d grants in all, want 2 (the failed one and the shared one)", g)
		}
		if err := e.Close(t.Context()); err != nil {
			t.Fatal(err)
		}
	})
}

package node_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/takeover"
)

// terms records every term of a project's queues that the Nodes reported, and reads the election
// keys, to check the hand-over rules on real servers: who stands in line, who leads, and that no
// queue ever had two leaders at once.
type terms struct {
	t       *testing.T
	cli     *clientv3.Client
	el      *election.Elector // for the election key layout only
	project string

	mu    sync.Mutex
	terms map[string][]*election.Term
}

func newTerms(t *testing.T, e *env, project string) *terms {
	cli := etcdx.Client(t, e.etcd)
	el, err := election.New(cli, election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = el.Close(context.WithoutCancel(t.Context())) })
	return &terms{t: t, cli: cli, el: el, project: project, terms: map[string][]*election.Term{}}
}

// listen records the terms n reports; call it before n starts.
func (r *terms) listen(n *baton.Node) {
	if err := n.Listen(baton.Listener{OnStartedLeading: func(_ context.Context, l baton.Lead) {
		r.mu.Lock()
		r.terms[l.Queue] = append(r.terms[l.Queue], l.Term)
		r.mu.Unlock()
	}}); err != nil {
		r.t.Fatal(err)
	}
}

// line returns the server IDs standing for queue, the leader first, as etcd shows them.
func (r *terms) line(queue string) ([]string, error) {
	resp, err := r.cli.Get(r.t.Context(), r.el.ElectionKey(r.project, queue)+"/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, kv := range resp.Kvs {
		ids = append(ids, string(kv.Value))
	}
	return ids, nil
}

// checkNoOverlap fails when two terms of a queue overlap: a successor's term must start after its
// predecessor's ended (both on this process's monotonic clock).
func (r *terms) checkNoOverlap() {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for q, ts := range r.terms {
		spans := make([][2]time.Time, 0, len(ts))
		for _, term := range ts {
			end, ok := term.Ended()
			if !ok {
				end = time.Now()
			}
			spans = append(spans, [2]time.Time{term.Started(), end})
		}
		slices.SortFunc(spans, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
		for i := 1; i < len(spans); i++ {
			if spans[i][0].Before(spans[i-1][1]) {
				r.t.Fatalf("queue %s: a term started at %v before its predecessor's ended at %v", q, spans[i][0], spans[i-1][1])
			}
		}
	}
}

// handedOver waits until to leads every queue with a dispatcher run and from stands for none.
func (r *terms) handedOver(from string, to *baton.Node, queues ...string) {
	r.t.Helper()
	eventually(r.t, time.Minute, from+" hands every queue to "+to.Config().ServerID, func() error {
		for _, q := range queues {
			line, err := r.line(q)
			if err != nil {
				return err
			}
			if slices.Contains(line, from) {
				return fmt.Errorf("%s still stands for %s: line %v", from, q, line)
			}
			if _, ok := leading(to, q); !ok || len(line) == 0 || line[0] != to.Config().ServerID {
				return fmt.Errorf("%s does not lead %s yet: line %v", to.Config().ServerID, q, line)
			}
		}
		return nil
	})
}

// An unversioned worker that the registry marks draining hands every queue over to the other worker
// and stops standing, never leaving a queue with two leaders at once; its readiness does not depend
// on leading. (Before, a worker without a Version ignored the registry's drain.)
func TestDrainingWorkerHandsEveryQueueOver(t *testing.T) {
	e := newEnv(t)
	p := project()
	queues := []string{"orders", "refunds", "returns"}
	rec := newTerms(t, e, p)
	appA, nodeA := e.app(t, fast(p, "drain-a", queues...))
	rec.listen(nodeA)
	appA.RequireStart()
	t.Cleanup(appA.RequireStop) // before the servers stop
	eventually(t, time.Minute, "drain-a leads every queue", func() error {
		for _, q := range queues {
			if _, ok := leading(nodeA, q); !ok {
				return fmt.Errorf("not %s yet", q)
			}
		}
		return nil
	})
	appB, nodeB := e.app(t, fast(p, "drain-b", queues...))
	rec.listen(nodeB)
	appB.RequireStart()
	t.Cleanup(appB.RequireStop) // before the servers stop
	for _, q := range queues {
		if err := nodeA.Registry().Drain(t.Context(), q, "drain-a"); err != nil {
			t.Fatal(err)
		}
	}
	rec.handedOver("drain-a", nodeB, queues...)
	if err := nodeA.Ready(); err != nil {
		t.Errorf("the drained worker is not ready: %v (readiness must not depend on leading)", err)
	}
	rec.checkNoOverlap()
}

// A queue whose takeover is under way is not handed over, even by a worker the registry drains: the
// leader holds the term until its dispatcher run is started, then hands the queue over. (A hand-off
// in the middle would cancel the takeover after it terminated the prior run, wasting it.)
func TestTakeoverUnderWayIsNotHandedOver(t *testing.T) {
	e := newEnv(t)
	p := project()
	queues := []string{"orders", "refunds"}
	rec := newTerms(t, e, p)

	// The first start of orders' dispatcher waits for release: the takeover is under way until then.
	entered, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	var interrupted atomic.Bool
	cfgA := fast(p, "busy-a", queues...)
	cfgA.Takeover.AttemptTimeout = 5 * time.Minute
	// The test watches one term for seconds: a session lost to a stalled machine (fast's 2 s TTL
	// under -race and load) ends it just as a hand-over would, so both workers keep a longer one.
	cfgA.Election.TTL = 10 * time.Second
	cfgA.Takeover.Start = func(ctx context.Context, s *takeover.Start) error {
		first := false
		if s.Owner.Queue == "orders" {
			once.Do(func() { first = true; close(entered) })
		}
		if !first {
			return nil
		}
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			interrupted.Store(true)
			return ctx.Err()
		}
	}
	appA, nodeA := e.app(t, cfgA)
	rec.listen(nodeA)
	appA.RequireStart()
	t.Cleanup(appA.RequireStop) // before the servers stop
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("busy-a never started orders' takeover")
	}
	eventually(t, time.Minute, "busy-a leads refunds", func() error {
		if _, ok := leading(nodeA, "refunds"); !ok {
			return fmt.Errorf("status %+v", nodeA.Status())
		}
		return nil
	})

	cfgB := fast(p, "busy-b", queues...)
	cfgB.Election.TTL = cfgA.Election.TTL
	appB, nodeB := e.app(t, cfgB)
	rec.listen(nodeB)
	appB.RequireStart()
	t.Cleanup(appB.RequireStop) // before the servers stop
	eventually(t, time.Minute, "busy-b stands in line for orders", func() error {
		line, err := rec.line("orders")
		if err != nil {
			return err
		}
		if !slices.Equal(line, []string{"busy-a", "busy-b"}) {
			return fmt.Errorf("line %v", line)
		}
		return nil
	})
	for _, q := range queues {
		if err := nodeA.Registry().Drain(t.Context(), q, "busy-a"); err != nil {
			t.Fatal(err)
		}
	}
	// The drain went through: refunds, whose takeover is done, moves to busy-b.
	rec.handedOver("busy-a", nodeB, "refunds")
	// Orders stays with busy-a while its takeover waits. There is no event for "decided not to hand
	// over", so this watches for the hand-over a while: without the rule it comes within the grace
	// window (500 ms) after the drain, and cancels the waiting takeover.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		line, err := rec.line("orders")
		if err != nil {
			t.Fatal(err)
		}
		if interrupted.Load() || len(line) == 0 || line[0] != "busy-a" {
			t.Fatalf("orders was handed over during its takeover: line %v, takeover interrupted %v", line, interrupted.Load())
		}
	}
	close(release)
	rec.handedOver("busy-a", nodeB, queues...)
	if interrupted.Load() {
		t.Fatal("orders' takeover was interrupted")
	}
	if q, _ := leading(nodeB, "orders"); q.Token == 0 {
		t.Fatalf("busy-b leads orders without a token: %+v", q)
	}
	rec.checkNoOverlap()
}

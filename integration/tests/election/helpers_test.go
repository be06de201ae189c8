package election_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

const project = "billing"

// candidate is one simulated process: its own etcd client and Elector.
type candidate struct {
	id     string
	client *clientv3.Client
	el     *election.Elector
}

func newCandidate(t *testing.T, c *etcdx.Cluster, id string, cfg election.Config, endpoints ...string) *candidate {
	t.Helper()
	cli := etcdx.Client(t, c, endpoints...)
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t).Named(id)
	}
	el, err := election.New(cli, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		if err := el.Close(ctx); err != nil {
			t.Errorf("%s: close: %v", id, err)
		}
	})
	return &candidate{id: id, client: cli, el: el}
}

// ledger records every term handed out in the test process; all times come from one monotonic clock.
type ledger struct {
	mu      sync.Mutex
	terms   []*election.Term
	elected chan *election.Term
}

func newLedger() *ledger { return &ledger{elected: make(chan *election.Term, 1000)} }

func (l *ledger) add(term *election.Term) {
	l.mu.Lock()
	l.terms = append(l.terms, term)
	l.mu.Unlock()
	l.elected <- term
}

func (l *ledger) all() []*election.Term {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.terms)
}

// live returns the terms not yet ended, per queue.
func (l *ledger) live() map[string][]*election.Term {
	out := map[string][]*election.Term{}
	for _, term := range l.all() {
		if term.Err() == nil {
			out[term.Queue()] = append(out[term.Queue()], term)
		}
	}
	return out
}

// checkNoOverlap asserts invariant 1 per queue: ordered by start, every term ended strictly before its
// successor started, and fencing tokens grow.
func (l *ledger) checkNoOverlap(t *testing.T) {
	t.Helper()
	byQueue := map[string][]*election.Term{}
	for _, term := range l.all() {
		byQueue[term.Queue()] = append(byQueue[term.Queue()], term)
	}
	for queue, terms := range byQueue {
		slices.SortFunc(terms, func(a, b *election.Term) int { return a.Started().Compare(b.Started()) })
		for i := 1; i < len(terms); i++ {
			prev, cur := terms[i-1], terms[i]
			ended, ok := prev.Ended()
			if !ok {
				t.Errorf("queue %s: term %d (%s) started at %v while term %d (%s) had not ended",
					queue, cur.Token(), cur.LeaderID(), cur.Started(), prev.Token(), prev.LeaderID())
				continue
			}
			if !ended.Before(cur.Started()) {
				t.Errorf("queue %s: term %d (%s) started %v before term %d (%s) ended",
					queue, cur.Token(), cur.LeaderID(), ended.Sub(cur.Started()), prev.Token(), prev.LeaderID())
			}
			if cur.Token() <= prev.Token() {
				t.Errorf("queue %s: token %d follows token %d", queue, cur.Token(), prev.Token())
			}
		}
	}
}

// runCandidate runs el.Run for queue until the test ends, recording terms; OnElected holds the term
// until it ends.
func runCandidate(t *testing.T, ctx context.Context, cand *candidate, queue string, l *ledger, wg *sync.WaitGroup) {
	wg.Go(func() {
		err := cand.el.Run(ctx, project, queue, cand.id, election.Callbacks{
			OnElected: func(ctx context.Context, term *election.Term) error {
				l.add(term)
				<-ctx.Done()
				return nil
			},
		})
		if err != nil {
			t.Errorf("%s: Run: %v", cand.id, err)
		}
	})
}

// waitElected returns the next term recorded in l, failing the test after limit.
func waitElected(t *testing.T, l *ledger, limit time.Duration) *election.Term {
	t.Helper()
	select {
	case term := <-l.elected:
		return term
	case <-time.After(limit):
		t.Fatalf("no term started within %v", limit)
		return nil
	}
}

// waitCandidates polls etcd until prefix holds n candidate keys.
func waitCandidates(t *testing.T, cli *clientv3.Client, prefix string, n int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		resp, err := cli.Get(t.Context(), prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count == int64(n) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: want %d candidates within %v (last: %v, %v)", prefix, n, limit, resp, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// deleteWatcher records when etcd reports each deletion under prefix, as a separate client sees it.
type deleteWatcher struct {
	mu   sync.Mutex
	seen map[string]time.Time
}

func watchDeletes(t *testing.T, ctx context.Context, cli *clientv3.Client, prefix string, wg *sync.WaitGroup) *deleteWatcher {
	w := &deleteWatcher{seen: map[string]time.Time{}}
	wch := cli.Watch(ctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithFilterPut())
	wg.Go(func() {
		for resp := range wch {
			now := time.Now()
			w.mu.Lock()
			for _, ev := range resp.Events {
				if _, ok := w.seen[string(ev.Kv.Key)]; !ok {
					w.seen[string(ev.Kv.Key)] = now
				}
			}
			w.mu.Unlock()
		}
	})
	return w
}

func (w *deleteWatcher) waitFor(t *testing.T, key string, limit time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		w.mu.Lock()
		at, ok := w.seen[key]
		w.mu.Unlock()
		if ok {
			return at
		}
		if time.Now().After(deadline) {
			t.Fatalf("no delete of %s seen within %v", key, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recorder keeps the events a sink receives.
type recorder struct {
	mu     sync.Mutex
	events []event.Event
}

func (r *recorder) sink(e event.Event) {
	r.mu.Lock()
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// of returns the events of kind about queue.
func (r *recorder) of(kind event.Kind, queue string) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []event.Event
	for _, e := range r.events {
		if e.Kind == kind && e.Queue == queue {
			out = append(out, e)
		}
	}
	return out
}

package balance_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
)

func TestMain(m *testing.M) { harness.VerifyTestMain(m) }

// ttl is the workers' lease TTL. Workers here only stop gracefully (their terms are resigned and the
// lease revoked), so no wait in these tests is TTL long. A 2 s TTL leaves 1.5 s for a keepalive round
// trip, which 1,000 campaigns with the race detector on a loaded 2-core machine do not always
// get: sessions were lost by the hundred and their queues came back only after more losses. 10 s
// (Baton's default) leaves 7.5 s.
const ttl = 10 * time.Second

// settleWithin bounds each wait for the fleet to settle. It only ends a wait that has failed anyway: a
// session lost under load leaves its keys until the TTL, and every campaign of the worker starts over.
const settleWithin = 3 * time.Minute

// worker is one process: its own client, Elector and Runner, leading some queues.
type worker struct {
	id     string
	runner *balance.Runner
	stop   func()

	mu      sync.Mutex
	leading map[string]int64
}

type fleet struct {
	t       *testing.T
	cluster *etcdx.Cluster
	queues  []string
	shed    float64
	keys    *election.Elector // for the layout of the election keys only
	disable bool

	mu      sync.Mutex
	workers []*worker
	// terms records, per queue, every ended term as [start, end] on the process's monotonic clock.
	terms map[string][][2]time.Time
	// owners records, per queue, who won each term, in the order the terms started.
	owners map[string][]string
}

func (f *fleet) start(id string) *worker { return f.startWith(id, nil) }

// startWith starts a worker whose balance config tune changes.
func (f *fleet) startWith(id string, tune func(*balance.Config)) *worker {
	t := f.t
	cli := etcdx.Client(t, f.cluster)
	el, err := election.New(cli, election.Config{TTL: ttl, Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))})
	if err != nil {
		t.Fatal(err)
	}
	bcfg := balance.Config{Project: "p", ServerID: id, Queues: f.queues, ShedAbove: f.shed, Disabled: f.disable,
		Logger: zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).With(zap.String("w", id))}
	if tune != nil {
		tune(&bcfg)
	}
	r, err := balance.New(el, cli, bcfg)
	if err != nil {
		t.Fatal(err)
	}
	w := &worker{id: id, runner: r, leading: map[string]int64{}}
	f.mu.Lock()
	if f.keys == nil {
		f.keys = el
	}
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = r.Run(ctx, func(string) election.Callbacks {
			return election.Callbacks{
				OnElected: func(ctx context.Context, term *election.Term) error {
					w.mu.Lock()
					w.leading[term.Queue()] = term.Token()
					w.mu.Unlock()
					f.mu.Lock()
					if f.owners != nil {
						f.owners[term.Queue()] = append(f.owners[term.Queue()], id)
					}
					f.mu.Unlock()
					<-ctx.Done()
					w.mu.Lock()
					delete(w.leading, term.Queue())
					w.mu.Unlock()
					ended, _ := term.Ended()
					f.mu.Lock()
					f.terms[term.Queue()] = append(f.terms[term.Queue()], [2]time.Time{term.Started(), ended})
					f.mu.Unlock()
					return nil
				},
			}
		})
	})
	w.stop = sync.OnceFunc(func() {
		cancel()
		wg.Wait()
		cctx, c := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer c()
		_ = el.Close(cctx)
	})
	t.Cleanup(w.stop)
	f.mu.Lock()
	f.workers = append(f.workers, w)
	f.mu.Unlock()
	return w
}

func (w *worker) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.leading)
}

// settle waits until every queue is led by exactly one live worker and no live worker leads more than
// limit, and returns the per-worker counts.
func (f *fleet) settle(live []*worker, limit int, d time.Duration) []int {
	f.t.Helper()
	deadline := time.Now().Add(d)
	for {
		counts := make([]int, len(live))
		total := 0
		for i, w := range live {
			counts[i] = w.count()
			total += counts[i]
		}
		f.checkNoOverlap()
		if total == len(f.queues) && slicesMax(counts) <= limit {
			return counts
		}
		if time.Now().After(deadline) {
			f.dumpUnled(live)
			f.t.Fatalf("not settled within %v: %d of %d queues led, counts %v (limit %d)", d, total, len(f.queues), counts, limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkNoOverlap fails when two ended terms of a queue overlap: a successor's term must start after
// its predecessor's ended.
func (f *fleet) checkNoOverlap() {
	f.t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for q, terms := range f.terms {
		sorted := slices.Clone(terms)
		slices.SortFunc(sorted, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
		for i := 1; i < len(sorted); i++ {
			if sorted[i][0].Before(sorted[i-1][1]) {
				f.t.Fatalf("queue %s: a term started at %v before its predecessor's ended at %v", q, sorted[i][0], sorted[i-1][1])
			}
		}
	}
}

// waitCandidates waits until n candidates (leaders and those in line) stand for the fleet's queues,
// as etcd shows them.
func (f *fleet) waitCandidates(n int) {
	f.t.Helper()
	cli := etcdx.Client(f.t, f.cluster)
	harness.Eventually(f.t, settleWithin, "candidates in line", func() error {
		total := 0
		for _, q := range f.queues {
			resp, err := cli.Get(f.t.Context(), f.keys.ElectionKey("p", q)+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return err
			}
			total += int(resp.Count)
		}
		if total != n {
			return fmt.Errorf("%d of %d", total, n)
		}
		return nil
	})
}

func slicesMax(s []int) int {
	m := 0
	for _, v := range s {
		m = max(m, v)
	}
	return m
}

// 5 workers over 200 queues, started one after another: once settled, none leads more than 2× its
// fair share, every queue is led, and never by two workers at once; the same after a rolling restart.
func TestLeadershipIsBalanced(t *testing.T) {
	const n, queues = 5, 200
	f := &fleet{t: t, cluster: etcdx.Start(t, etcdx.Options{}), terms: map[string][][2]time.Time{}}
	for i := range queues {
		f.queues = append(f.queues, fmt.Sprintf("q%03d", i))
	}
	fair := queues / n
	var live []*worker
	for i := range n {
		live = append(live, f.start(fmt.Sprintf("w%d", i)))
		time.Sleep(100 * time.Millisecond) // staggered: the first would take everything
	}
	// Shedding settles at ShedAbove (1.25) × fair share, well inside the 2× bound.
	limit := (fair*5 + 3) / 4
	counts := f.settle(live, limit, settleWithin)
	t.Logf("after start-up: %v (fair share %d)", counts, fair)
	for i := range n {
		live[i].stop()
		live[i] = f.start(fmt.Sprintf("w%d-r", i))
		f.settle(live, 2*fair, settleWithin)
	}
	counts = f.settle(live, limit, settleWithin)
	t.Logf("after a rolling restart: %v (fair share %d)", counts, fair)
}

// Without balancing the first worker leads everything: the baseline the mechanism is measured against.
func TestWithoutBalancingTheFirstTakesAll(t *testing.T) {
	f := &fleet{t: t, cluster: etcdx.Start(t, etcdx.Options{}), terms: map[string][][2]time.Time{}, disable: true}
	for i := range 50 {
		f.queues = append(f.queues, fmt.Sprintf("q%03d", i))
	}
	// The first leads all 50 before the others join (a wait on that event, not a guessed pause: under
	// load its campaigns can take seconds); without balancing, the others never get any.
	live := []*worker{f.start("w0")}
	f.settle(live, 50, settleWithin)
	live = append(live, f.start("w1"), f.start("w2"))
	f.waitCandidates(3 * 50)
	counts := f.settle(live, 50, settleWithin)
	if counts[0] != 50 {
		t.Fatalf("counts %v: expected the first worker to lead all 50 without balancing", counts)
	}
}

// dumpUnled logs the candidates of every queue no live worker leads, to tell a blocked line from an
// empty one.
func (f *fleet) dumpUnled(live []*worker) {
	led := map[string]bool{}
	for _, w := range live {
		w.mu.Lock()
		for q := range w.leading {
			led[q] = true
		}
		w.mu.Unlock()
	}
	cli := etcdx.Client(f.t, f.cluster)
	for _, q := range f.queues {
		if led[q] {
			continue
		}
		resp, err := cli.Get(f.t.Context(), f.keys.ElectionKey("p", q)+"/", clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		if err != nil {
			continue
		}
		var line []string
		for _, kv := range resp.Kvs {
			line = append(line, fmt.Sprintf("%s@%d", kv.Value, kv.CreateRevision))
		}
		f.t.Logf("queue %s is not led; in line: %v", q, line)
	}
}

package balance_test

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
)

func newFleet(t *testing.T, queues int) *fleet {
	f := &fleet{t: t, cluster: etcdx.Start(t, etcdx.Options{}), terms: map[string][][2]time.Time{},
		owners: map[string][]string{}}
	for i := range queues {
		f.queues = append(f.queues, fmt.Sprintf("q%03d", i))
	}
	return f
}

func versioned(v string) func(*balance.Config) {
	return func(c *balance.Config) { c.Version = v }
}

// waitStanding waits until the worker id stands (leads or is in line) for n of the fleet's queues.
func (f *fleet) waitStanding(id string, n int) {
	f.t.Helper()
	cli := etcdx.Client(f.t, f.cluster)
	harness.Eventually(f.t, settleWithin, id+" standing", func() error {
		got := 0
		for _, q := range f.queues {
			resp, err := cli.Get(f.t.Context(), f.keys.ElectionKey("p", q)+"/", clientv3.WithPrefix())
			if err != nil {
				return err
			}
			for _, kv := range resp.Kvs {
				if string(kv.Value) == id {
					got++
				}
			}
		}
		if got != n {
			return fmt.Errorf("%d of %d", got, n)
		}
		return nil
	})
}

// waitLinedUp waits until nw stands for every queue that one of old leads.
func (f *fleet) waitLinedUp(nw *worker, old []*worker) {
	f.t.Helper()
	cli := etcdx.Client(f.t, f.cluster)
	harness.Eventually(f.t, settleWithin, nw.id+" in line", func() error {
		for _, w := range old {
			w.mu.Lock()
			var qs []string
			for q := range w.leading {
				qs = append(qs, q)
			}
			w.mu.Unlock()
			for _, q := range qs {
				resp, err := cli.Get(f.t.Context(), f.keys.ElectionKey("p", q)+"/", clientv3.WithPrefix())
				if err != nil {
					return err
				}
				if !slices.ContainsFunc(resp.Kvs, func(kv *mvccpb.KeyValue) bool { return string(kv.Value) == nw.id }) {
					return fmt.Errorf("not in line for %s", q)
				}
			}
		}
		return nil
	})
}

// ownerChanges counts, per queue, the owners after the first that each queue had from index from on.
func (f *fleet) ownerChanges(from map[string]int) (total int, most int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, q := range f.queues {
		n := len(f.owners[q]) - from[q]
		total += n
		most = max(most, n)
	}
	return total, most
}

func (f *fleet) marks() map[string]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]int{}
	for q, o := range f.owners {
		m[q] = len(o)
	}
	return m
}

// A surge rollout (a v2 worker starts, then a v1 worker stops, three times over) moves each queue
// once, forward only: no queue ever goes back to a v1 worker once a v2 worker led it, no queue moves
// twice, and the new workers end up with the old workers' shares (the successor is the new worker
// leading fewest). Today's balancer moves queues to v1 workers and back, and rebalances meanwhile.
func TestSurgeRolloutMovesEachQueueOnceForward(t *testing.T) {
	const n, queues = 3, 30
	f := newFleet(t, queues)
	var live []*worker
	for i := range n {
		live = append(live, f.startWith(fmt.Sprintf("old%d", i), versioned("v1.9.0")))
	}
	fair := queues / n
	limit := fair * 5 / 4 // within ShedAbove (1.25) × fair share, where shedding stops
	// Balanced before the rollout (no worker above ShedAbove × fair share, so start-up shedding is
	// over), so that what moves afterwards is the rollout's doing.
	f.settle(live, limit, settleWithin)
	// The counts can settle while a balancer still sheds (a term is counted until its hand-off ends):
	// wait until no hand-off is in flight either (a hand-off hint lives from the decision until the
	// term has ended; the key layout is in package balance's doc).
	cli := etcdx.Client(t, f.cluster)
	hints := f.keys.Config().Prefix + "-balance/p/h/"
	harness.Eventually(t, settleWithin, "start-up shedding over", func() error {
		resp, err := cli.Get(t.Context(), hints, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count != 0 {
			return fmt.Errorf("%d hand-offs in flight", resp.Count)
		}
		total := 0
		for _, w := range live {
			if l := w.runner.Leading(); l > limit {
				return fmt.Errorf("%s leads %d (limit %d)", w.id, l, limit)
			} else {
				total += l
			}
		}
		if total != queues {
			return fmt.Errorf("%d of %d queues led", total, queues)
		}
		return nil
	})
	f.settle(live, limit, settleWithin)
	before := f.marks()
	for i := range n {
		nw := f.startWith(fmt.Sprintf("new%d", i), versioned("v1.10.0"))
		// The new worker stands in line behind every queue an old worker leads, ready to be named.
		f.waitLinedUp(nw, live[i:])
		// And every worker's own view shows it (etcd showed it first): a leader that resigns names
		// its successor from its view.
		harness.Eventually(t, settleWithin, "every worker sees "+nw.id, func() error {
			for _, w := range live {
				if got := w.runner.Workers(); got != n+1 {
					return fmt.Errorf("%s sees %d workers", w.id, got)
				}
			}
			return nil
		})
		live[i].stop()
		live[i] = nw
		f.settle(live, queues, settleWithin)
	}
	counts := f.settle(live, limit, settleWithin)
	total, most := f.ownerChanges(before)
	t.Logf("after the rollout: %v; %d owner changes for %d queues (most for one queue: %d)", counts, total, queues, most)
	f.mu.Lock()
	for q, owners := range f.owners {
		seenNew := false
		for _, o := range owners {
			if strings.HasPrefix(o, "new") {
				seenNew = true
			} else if seenNew {
				t.Errorf("queue %s went back to the old version: owners %v", q, owners)
			}
		}
	}
	f.mu.Unlock()
	f.mu.Lock()
	for q, o := range f.owners {
		if len(o)-before[q] > 1 {
			t.Logf("%s moved more than once: %v", q, o[before[q]-1:])
		}
	}
	f.mu.Unlock()
	if most > 1 || total != queues {
		t.Fatalf("%d owner changes for %d queues, %d at most for one: want each queue moved exactly once", total, queues, most)
	}
}

// Two queues on two workers end one and one: the small-fleet rule moves a queue when another worker
// standing for it leads two fewer. Today the first worker leads both for ever (fair share 1, and
// 2 is not above ceil(1.25 × 1)).
func TestSmallFleetSpreads(t *testing.T) {
	f := newFleet(t, 2)
	fast := func(c *balance.Config) { c.Version, c.Cooldown = "v1", 100*time.Millisecond }
	a := f.startWith("a", fast)
	f.settle([]*worker{a}, 2, settleWithin)
	b := f.startWith("b", fast)
	counts := f.settle([]*worker{a, b}, 1, time.Minute)
	t.Logf("counts %v", counts)
	// One queue moved, once: a worker that sheds does not count the queue on its way as still its own
	// (it would hand both over, and get both back).
	f.mu.Lock()
	defer f.mu.Unlock()
	moves := 0
	for q, owners := range f.owners {
		if len(owners) > 2 || len(owners) == 2 && owners[0] == owners[1] {
			t.Errorf("queue %s: owners %v, want a, then at most one move", q, owners)
		}
		moves += len(owners) - 1
	}
	if moves != 1 {
		t.Errorf("%d moves, want 1 (owners %v)", moves, f.owners)
	}
}

// A worker marked draining hands every queue over and stops standing; the queues are never led twice
// at once and the others take all of them.
func TestDrainHandsOver(t *testing.T) {
	const queues = 12
	f := newFleet(t, queues)
	var live []*worker
	for i := range 3 {
		live = append(live, f.startWith(fmt.Sprintf("w%d", i), versioned("v1")))
	}
	f.settle(live, 5, settleWithin)
	live[0].runner.SetDraining(true)
	counts := f.settle(live[1:], queues, settleWithin)
	f.waitStanding("w0", 0)
	if c := live[0].count(); c != 0 {
		t.Fatalf("the draining worker still leads %d queues", c)
	}
	t.Logf("after the drain: %v", counts)
}

// leadingNow returns the queues w leads, with their tokens.
func (w *worker) leadingNow() map[string]int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return maps.Clone(w.leading)
}

// leads reports whether w leads queue.
func (w *worker) leads(queue string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.leading[queue]
	return ok
}

// Workers with different queue sets: w0 serves q000 and q001, w1 only q001. A drain of w0 hands
// q001 over to w1, and keeps q000, which nobody else serves, led by w0 without a gap (it is never
// handed over to nobody and taken back), and the Runner says why.
func TestDrainKeepsAQueueOnlyItServes(t *testing.T) {
	f := newFleet(t, 2)
	only, shared := f.queues[0], f.queues[1]
	w0 := f.start("w0")
	harness.Eventually(t, settleWithin, "w0 leads both queues", func() error {
		if !w0.leads(only) || !w0.leads(shared) {
			return fmt.Errorf("w0 leads %v", w0.leadingNow())
		}
		return nil
	})
	w1 := f.startWith("w1", func(c *balance.Config) { c.Queues = []string{shared} })
	w0.runner.SetDraining(true)
	harness.Eventually(t, settleWithin, "w1 takes the shared queue over", func() error {
		if !w1.leads(shared) {
			return fmt.Errorf("w1 leads %v", w1.leadingNow())
		}
		return nil
	})
	// A few grace windows and vacancy waits: the queue only w0 serves stays where it is.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if !w0.leads(only) {
			f.mu.Lock()
			owners := slices.Clone(f.owners[only])
			f.mu.Unlock()
			t.Fatalf("%s, which only the draining w0 serves, lost its leader; owners %v", only, owners)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f.mu.Lock()
	owners := slices.Clone(f.owners[only])
	f.mu.Unlock()
	if len(owners) != 1 {
		t.Fatalf("%s changed hands: owners %v, want w0 alone", only, owners)
	}
	if why := w0.runner.HandOverWaiting(only); why == "" {
		t.Errorf("HandOverWaiting(%s) is empty: the status must say why a draining worker keeps it", only)
	}
	if why := w0.runner.HandOverWaiting(shared); why != "" {
		t.Errorf("HandOverWaiting(%s) = %q for a queue w0 no longer leads", shared, why)
	}
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/metric"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
)

// A fleet is workers campaigning for the same queues, either through Baton (election + balance) or
// through bare concurrency.Election, each with an etcd client of its own. The scale and rollout
// sections run their fleets in this process; a scale worker process (scaleproc.go) is a fleet of one.
type fleet struct {
	cluster *etcdx.Cluster
	project string
	queues  []string
	ttl     time.Duration // 0: election's default
	bare    bool
	balance bool
	// direct workers dial etcd themselves; the others go through a proxy of their own, so that one can
	// be cut off as a crash would (the proxy's hop is then part of every figure).
	direct bool
	meters metric.MeterProvider // the balancers' metrics; nil: none

	lost    atomic.Int64 // session losses of the Baton workers that were not cut off, once closed
	led     atomic.Int64 // queues whose current leader's term is live, as the workers see it
	workers []*fleetWorker

	mu         sync.Mutex
	firstLed   map[string]bool           // queues that have had a leader since the fleet started
	allFirstAt time.Time                 // when the last queue got its first leader
	starts     int                       // Baton terms started
	terms      map[string][][2]time.Time // per queue, every ended Baton term as [start, end]
	vacant     map[string]time.Time      // per queue, when its last term ended, while no term has started since
	gaps       []time.Duration           // per handover: from a term's end to the queue's next term's start
}

type fleetWorker struct {
	id      string
	proxy   *etcdx.Proxy // nil for a direct worker
	cli     *clientv3.Client
	el      *election.Elector
	stop    context.CancelFunc
	wg      sync.WaitGroup
	leading atomic.Int64
	losses  atomic.Int64 // its elector's session losses
	cut     bool         // cut off on purpose: its session loss is the point, not a want of CPU
	leaders sync.Map     // queue -> leader's server ID, from OnNewLeader, as a Node keeps it for its status
}

// lossCounting is an event sink that counts, in n, the elector's lost sessions.
func lossCounting(n *atomic.Int64) event.Sink {
	return func(e event.Event) {
		if e.Kind == event.SessionLost {
			n.Add(1)
		}
	}
}

// bareKey is the prefix of a bare fleet's election for queue (of every queue, with "").
func bareKey(project, queue string) string { return "/bench-bare/" + project + "/" + queue }

func queueNames(n int) []string {
	qs := make([]string, n)
	for i := range qs {
		qs[i] = fmt.Sprintf("q%05d", i)
	}
	return qs
}

// start starts a worker of the fleet with server ID id and version (Baton only; "" for none).
func (f *fleet) start(ctx context.Context, id, version string) (w *fleetWorker, err error) {
	w = &fleetWorker{id: id}
	wctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	defer func() {
		if err != nil {
			w.stop()
			w.release()
		}
	}()
	if f.direct {
		w.cli, err = f.cluster.NewClient()
	} else if w.proxy, err = etcdx.NewProxy(f.cluster.Endpoints()[0]); err == nil {
		w.cli, err = f.cluster.NewClient(w.proxy.URL())
	}
	if err != nil {
		return nil, err
	}
	if f.terms == nil { // the first worker: nothing runs yet
		f.firstLed, f.terms, f.vacant = map[string]bool{}, map[string][][2]time.Time{}, map[string]time.Time{}
	}
	lead := func(tctx context.Context, q string) {
		w.leading.Add(1)
		f.led.Add(1)
		f.mu.Lock()
		if !f.firstLed[q] {
			if f.firstLed[q] = true; len(f.firstLed) == len(f.queues) {
				f.allFirstAt = time.Now()
			}
		}
		f.mu.Unlock()
		<-tctx.Done()
		f.led.Add(-1)
		w.leading.Add(-1)
	}
	if f.bare {
		var s *concurrency.Session
		ttl := cmp.Or(f.ttl, election.DefaultConfig().TTL)
		if s, err = concurrency.NewSession(w.cli, concurrency.WithTTL(int(ttl/time.Second))); err != nil {
			return nil, err
		}
		for _, q := range f.queues {
			w.wg.Go(func() {
				e := concurrency.NewElection(s, bareKey(f.project, q))
				if err := e.Campaign(wctx, id); err != nil {
					return
				}
				tctx, c := context.WithCancel(wctx)
				stop := context.AfterFunc(s.Ctx(), c)
				lead(tctx, q)
				stop()
				c()
			})
		}
		w.wg.Go(func() { <-wctx.Done(); s.Orphan() })
		f.workers = append(f.workers, w)
		return w, nil
	}
	if w.el, err = election.New(w.cli, election.Config{TTL: f.ttl, Events: lossCounting(&w.losses)}); err != nil {
		return nil, err
	}
	runner, err := balance.New(w.el, w.cli, balance.Config{Project: f.project, ServerID: id, Version: version,
		Queues: f.queues, Disabled: !f.balance, MeterProvider: f.meters})
	if err != nil {
		return nil, err
	}
	w.wg.Go(func() {
		_ = runner.Run(wctx, func(q string) election.Callbacks {
			return election.Callbacks{OnNewLeader: func(l election.Leader) { w.leaders.Store(q, l.ID) },
				OnElected: func(tctx context.Context, term *election.Term) error {
					f.mu.Lock()
					f.starts++
					if end, ok := f.vacant[q]; ok {
						f.gaps = append(f.gaps, term.Started().Sub(end))
						delete(f.vacant, q)
					}
					f.mu.Unlock()
					lead(tctx, q)
					if end, ok := term.Ended(); ok {
						f.mu.Lock()
						f.terms[q] = append(f.terms[q], [2]time.Time{term.Started(), end})
						f.vacant[q] = end
						f.mu.Unlock()
					}
					return nil
				}}
		})
	})
	f.workers = append(f.workers, w)
	return w, nil
}

// release closes what start opened, in reverse.
func (w *fleetWorker) release() {
	if w.cli != nil {
		w.cli.Close()
	}
	if w.proxy != nil {
		w.proxy.Close()
	}
}

// stop stops w gracefully (Baton resigns every term), releases it, takes it out of the fleet, and
// counts its session losses unless it was cut off on purpose.
func (f *fleet) stop(ctx context.Context, w *fleetWorker) {
	w.stop()
	if w.cut {
		// Nothing gets through its blackholed proxy, and a watch cancelled behind a stream that never
		// drains can wait forever (a bare campaign did, in concurrency.waitDeletes): close its client
		// first, as the crash it stands for would.
		w.release()
	}
	w.wg.Wait()
	if w.el != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = w.el.Close(cctx)
		cancel()
	}
	if !w.cut {
		w.release()
		f.lost.Add(w.losses.Load())
	}
	f.workers = slices.DeleteFunc(f.workers, func(o *fleetWorker) bool { return o == w })
}

func (f *fleet) stopAll(ctx context.Context) {
	for len(f.workers) > 0 {
		f.stop(ctx, f.workers[0])
	}
}

// overlaps counts the queues where a term started before its predecessor's ended (two leaders at
// once), the check integration/balance makes, and the terms looked at; the first overlap is described.
func overlaps(terms map[string][][2]time.Time) (n, total int, first string) {
	for q, ts := range terms {
		total += len(ts)
		ts = slices.Clone(ts)
		slices.SortFunc(ts, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
		for i := 1; i < len(ts); i++ {
			if ts[i][0].Before(ts[i-1][1]) {
				if n == 0 {
					first = fmt.Sprintf("queue %s: a term started %v before its predecessor's ended", q, ts[i-1][1].Sub(ts[i][0]))
				}
				n++
				break
			}
		}
	}
	return n, total, first
}

// waitAllLed waits up to scaleWait until every queue is led; it returns how long that took since since.
func (f *fleet) waitAllLed(ctx context.Context, since time.Time) (time.Duration, error) {
	err := harness.Poll(ctx, scaleWait, 2*time.Millisecond, func() error {
		if n := f.led.Load(); n < int64(len(f.queues)) {
			return fmt.Errorf("%d of %d queues led", n, len(f.queues))
		}
		return nil
	})
	return time.Since(since), err
}

// counts is how many queues each live worker leads.
func (f *fleet) counts() []int {
	counts := make([]int, len(f.workers))
	for i, w := range f.workers {
		counts[i] = int(w.leading.Load())
	}
	return counts
}

// settle waits until every queue is led and the leadership counts have not changed for still, and
// returns them; ok is false when that did not happen within timeout (the counts are the last seen).
func (f *fleet) settle(ctx context.Context, still, timeout time.Duration) (counts []int, ok bool) {
	counts, ok, _ = settle(ctx, still, 50*time.Millisecond, timeout, func() ([]int, bool, error) {
		return f.counts(), f.led.Load() == int64(len(f.queues)), nil
	})
	return counts, ok
}

// settle polls read every poll until it has said ready, with the same counts, for still; ok is false
// when that did not happen within timeout (the counts are then the last read).
func settle(ctx context.Context, still, poll, timeout time.Duration, read func() (counts []int, ready bool, err error)) (last []int, ok bool, err error) {
	deadline := time.Now().Add(timeout)
	stillSince := time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		counts, ready, err := read()
		if err != nil {
			return last, false, err
		}
		if !slices.Equal(counts, last) || !ready {
			last, stillSince = counts, time.Now()
		} else if time.Since(stillSince) >= still {
			return last, true, nil
		}
		time.Sleep(poll)
	}
	return last, false, nil
}

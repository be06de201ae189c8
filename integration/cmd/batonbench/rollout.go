package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
)

// The rollout section: a rolling restart of 5 workers over 100 queues, each old worker replaced by a
// new one, either surge (the new one starts, then the old one stops) or stop-then-start. Versioned
// workers (v1 -> v2) are measured beside unversioned ones (Baton's behaviour before versions) in the
// same run, on the same etcd.
const rolloutWorkers, rolloutQueues = 5, 100

type rolloutFleet struct {
	cluster *etcdtest.Cluster
	project string
	queues  []string

	mu      sync.Mutex
	owners  map[string]int       // terms started per queue
	ended   map[string]time.Time // when the queue's last term ended, while nobody leads it
	gaps    []time.Duration      // per handover: from a term's end to the next term's start
	leading map[string]int       // per worker
	workers map[string]func()    // stop per worker
}

func (f *rolloutFleet) start(ctx context.Context, id, version string) error {
	cli, err := f.cluster.NewClient()
	if err != nil {
		return err
	}
	el, err := election.New(cli, election.Config{TTL: 5 * time.Second})
	if err != nil {
		cli.Close()
		return err
	}
	r, err := balance.New(el, cli, balance.Config{Project: f.project, ServerID: id, Queues: f.queues, Version: version})
	if err != nil {
		cli.Close()
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = r.Run(wctx, func(q string) election.Callbacks {
			return election.Callbacks{OnElected: func(tctx context.Context, term *election.Term) error {
				f.mu.Lock()
				f.owners[q]++
				if end, ok := f.ended[q]; ok {
					f.gaps = append(f.gaps, term.Started().Sub(end))
					delete(f.ended, q)
				}
				f.leading[id]++
				f.mu.Unlock()
				<-tctx.Done()
				end, _ := term.Ended()
				f.mu.Lock()
				f.ended[q] = end
				f.leading[id]--
				f.mu.Unlock()
				return nil
			}}
		})
	})
	f.mu.Lock()
	f.workers[id] = func() {
		cancel()
		wg.Wait()
		cctx, c := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = el.Close(cctx)
		c()
		cli.Close()
	}
	f.mu.Unlock()
	return nil
}

func (f *rolloutFleet) stop(id string) {
	f.mu.Lock()
	stop := f.workers[id]
	delete(f.workers, id)
	f.mu.Unlock()
	stop()
	f.mu.Lock()
	delete(f.leading, id) // every term of the worker has ended
	f.mu.Unlock()
}

// settle waits until every queue is led and the counts have not changed for a second.
func (f *rolloutFleet) settle(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	var last string
	stable := time.Now()
	for ctx.Err() == nil {
		f.mu.Lock()
		total := 0
		for _, n := range f.leading {
			total += n
		}
		snap := fmt.Sprint(f.leading, len(f.gaps))
		f.mu.Unlock()
		if snap != last || total != len(f.queues) {
			last, stable = snap, time.Now()
		} else if time.Since(stable) > time.Second {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not settled within a minute: %s", snap)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

type rolloutResult struct {
	changesPerQueue float64
	gapP99, gapMax  time.Duration
	busiestShare    float64
}

func runRollout(ctx context.Context, cluster *etcdtest.Cluster, project string, surge, versioned bool) (rolloutResult, error) {
	f := &rolloutFleet{cluster: cluster, project: project, owners: map[string]int{}, ended: map[string]time.Time{},
		leading: map[string]int{}, workers: map[string]func(){}}
	for i := range rolloutQueues {
		f.queues = append(f.queues, fmt.Sprintf("q%03d", i))
	}
	defer func() {
		for id := range f.workers {
			f.stop(id)
		}
	}()
	v1, v2 := "", ""
	if versioned {
		v1, v2 = "v1", "v2"
	}
	for i := range rolloutWorkers {
		if err := f.start(ctx, fmt.Sprintf("old%d", i), v1); err != nil {
			return rolloutResult{}, err
		}
	}
	if err := f.settle(ctx); err != nil {
		return rolloutResult{}, err
	}
	// Let the start-up rebalancing finish (its cooldown) before the rollout is counted.
	time.Sleep(6 * time.Second)
	if err := f.settle(ctx); err != nil {
		return rolloutResult{}, err
	}
	f.mu.Lock()
	before := 0
	for _, n := range f.owners {
		before += n
	}
	f.gaps = nil
	f.mu.Unlock()
	for i := range rolloutWorkers {
		old, nw := fmt.Sprintf("old%d", i), fmt.Sprintf("new%d", i)
		if surge {
			if err := f.start(ctx, nw, v2); err != nil {
				return rolloutResult{}, err
			}
			time.Sleep(300 * time.Millisecond) // a new pod's readiness delay before the old one goes
			f.stop(old)
		} else {
			f.stop(old)
			if err := f.start(ctx, nw, v2); err != nil {
				return rolloutResult{}, err
			}
		}
		if err := f.settle(ctx); err != nil {
			return rolloutResult{}, err
		}
	}
	// The balance after the rollout, including whatever rebalancing follows it.
	time.Sleep(6 * time.Second)
	if err := f.settle(ctx); err != nil {
		return rolloutResult{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	after, busiest := 0, 0
	for _, n := range f.owners {
		after += n
	}
	for _, n := range f.leading {
		busiest = max(busiest, n)
	}
	slices.Sort(f.gaps)
	r := rolloutResult{changesPerQueue: float64(after-before) / float64(len(f.queues)),
		busiestShare: float64(busiest) / (float64(len(f.queues)) / rolloutWorkers)}
	if len(f.gaps) > 0 {
		r.gapP99, r.gapMax = benchreport.Percentile(f.gaps, 99), f.gaps[len(f.gaps)-1]
	}
	return r, nil
}

func benchRollout(ctx context.Context, cluster *etcdtest.Cluster, _ options) ([]benchreport.Figure, error) {
	var figs []benchreport.Figure
	one := func(name, unit string, v float64, bv float64, target string, met bool) benchreport.Figure {
		return benchreport.Figure{Name: name, Unit: unit, Samples: 1, P50: v, P95: v, P99: v,
			Baseline: "unversioned (balancer before versions)", BaselineP50: bv, BaselineP95: bv, Target: target, Met: met}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	for _, surge := range []bool{true, false} {
		kind := "stop-then-start"
		if surge {
			kind = "surge"
		}
		began := time.Now()
		base, err := runRollout(ctx, cluster, "rollout-base-"+kind, surge, false)
		if err != nil {
			return nil, fmt.Errorf("%s unversioned: %w", kind, err)
		}
		got, err := runRollout(ctx, cluster, "rollout-"+kind, surge, true)
		if err != nil {
			return nil, fmt.Errorf("%s versioned: %w", kind, err)
		}
		fmt.Printf("rollout %s: %.2f owner changes per queue (unversioned %.2f); longest gap p99 %v max %v (unversioned p99 %v); busiest %.2f x fair (unversioned %.2f); %v\n",
			kind, got.changesPerQueue, base.changesPerQueue, got.gapP99, got.gapMax, base.gapP99, got.busiestShare, base.busiestShare,
			time.Since(began).Round(time.Second))
		n := fmt.Sprintf("rollout %s %dx%d", kind, rolloutWorkers, rolloutQueues)
		figs = append(figs,
			one(n+": owner changes per queue", "changes", got.changesPerQueue, base.changesPerQueue, "<= 1.05", got.changesPerQueue <= 1.05),
			one(n+": longest leaderless gap per handover (p99)", "ms", ms(got.gapP99), ms(base.gapP99), "<= 50 ms", ms(got.gapP99) <= 50),
			one(n+": busiest worker after the rollout", "x fair share", got.busiestShare, base.busiestShare, "<= 1.25", got.busiestShare <= 1.25))
	}
	return figs, nil
}

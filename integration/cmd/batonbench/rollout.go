package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
)

// The rollout section: a rolling restart of 5 workers over 100 queues, each old worker replaced by a
// new one, either surge (the new one starts, then the old one stops) or stop-then-start. Versioned
// workers (v1 -> v2) are measured beside unversioned ones in the same run, on the same etcd: the same
// hand-overs (successor, drain, calm balancer) without forward-only, which shows what the version
// order adds. (Before #16 the balancer moved each queue 1.70-1.82 times per surge rollout and
// 1.33-1.35 times per stop-then-start; that balancer is gone, so it is no longer measured.)
const rolloutWorkers, rolloutQueues = 5, 100

type rolloutFleet struct {
	cluster *etcdtest.Cluster
	project string
	queues  []string
	meters  *sdkmetric.MeterProvider
	reader  *sdkmetric.ManualReader

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
	r, err := balance.New(el, cli, balance.Config{Project: f.project, ServerID: id, Queues: f.queues, Version: version,
		MeterProvider: f.meters})
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
func (f *rolloutFleet) settle(ctx context.Context) error { return f.settleWithin(ctx, len(f.queues)) }

// settleWithin waits until every queue is led, no worker leads more than limit, and the counts have
// not changed for a second.
func (f *rolloutFleet) settleWithin(ctx context.Context, limit int) error {
	deadline := time.Now().Add(time.Minute)
	var last string
	stable := time.Now()
	for ctx.Err() == nil {
		f.mu.Lock()
		total, busiest := 0, 0
		for _, n := range f.leading {
			total += n
			busiest = max(busiest, n)
		}
		snap := fmt.Sprint(f.leading, len(f.gaps))
		f.mu.Unlock()
		if snap != last || total != len(f.queues) || busiest > limit {
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

// reasons sums the owner changes counted so far by the workers, by reason.
func (f *rolloutFleet) reasons(ctx context.Context) (map[string]int64, error) {
	var rm metricdata.ResourceMetrics
	if err := f.reader.Collect(ctx, &rm); err != nil {
		return nil, err
	}
	by := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != balance.MetricOwnerChanges || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				reason, _ := dp.Attributes.Value("reason")
				by[reason.AsString()] += dp.Value
			}
		}
	}
	return by, nil
}

// noHandOffs waits until no hand-off is in flight: a hand-off hint lives from the decision until the
// term has ended (the key layout is in package balance's doc), and a shed decided before the rollout
// must not be counted as the rollout's.
func (f *rolloutFleet) noHandOffs(ctx context.Context) error {
	cli, err := f.cluster.NewClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	prefix := election.DefaultConfig().Prefix + "-balance/" + f.project + "/h/"
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		if resp.Count == 0 {
			return f.settle(ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d hand-offs still in flight after a minute", resp.Count)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type rolloutResult struct {
	changesPerQueue float64
	reasons         map[string]int64 // owner changes during the rollout by reason, as the balancer counted them
	gaps            []time.Duration  // per handover
	busiestShare    float64
	floor           float64 // the fewest owner changes per queue this rollout could make
}

func runRollout(ctx context.Context, cluster *etcdtest.Cluster, project string, surge, versioned bool) (rolloutResult, error) {
	f := &rolloutFleet{cluster: cluster, project: project, owners: map[string]int{}, ended: map[string]time.Time{},
		leading: map[string]int{}, workers: map[string]func(){}, reader: sdkmetric.NewManualReader()}
	f.meters = sdkmetric.NewMeterProvider(sdkmetric.WithReader(f.reader))
	defer func() { _ = f.meters.Shutdown(context.WithoutCancel(ctx)) }()
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
	// Let the start-up rebalancing finish (its cooldown) before the rollout is counted: shedding
	// stops once no worker leads more than ShedAbove (1.25) × its fair share.
	time.Sleep(6 * time.Second)
	if err := f.settleWithin(ctx, rolloutQueues/rolloutWorkers*5/4); err != nil {
		return rolloutResult{}, err
	}
	if err := f.noHandOffs(ctx); err != nil {
		return rolloutResult{}, err
	}
	f.mu.Lock()
	before := 0
	for _, n := range f.owners {
		before += n
	}
	f.gaps = nil
	f.mu.Unlock()
	reasonsBefore, err := f.reasons(ctx)
	if err != nil {
		return rolloutResult{}, err
	}
	// The floor: every queue moves to a new worker once. In a stop-then-start rollout the first
	// stopped worker's queues have no new worker to go to and move twice: 1 + 1/workers with an even
	// spread, more when the start-up left that worker above its fair share. (The last new worker then
	// leads nothing, within ShedAbove × fair share; spreading to it would move 1/workers more.)
	floor := 1.0
	if !surge {
		f.mu.Lock()
		floor += float64(f.leading["old0"]) / float64(len(f.queues))
		f.mu.Unlock()
	}
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
	reasons, err := f.reasons(ctx)
	if err != nil {
		return rolloutResult{}, err
	}
	for k, n := range reasonsBefore {
		if reasons[k] -= n; reasons[k] == 0 {
			delete(reasons, k)
		}
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
	return rolloutResult{changesPerQueue: float64(after-before) / float64(len(f.queues)), reasons: reasons,
		gaps: f.gaps, busiestShare: float64(busiest) / (float64(len(f.queues)) / rolloutWorkers), floor: floor}, nil
}

func benchRollout(ctx context.Context, cluster *etcdtest.Cluster, _ options) ([]benchreport.Figure, error) {
	var figs []benchreport.Figure
	const baseline = "unversioned workers (no forward-only)"
	one := func(name, unit string, v float64, bv float64, target string, met bool) benchreport.Figure {
		return benchreport.Figure{Name: name, Unit: unit, Samples: 1, P50: v, P95: v, P99: v,
			Baseline: baseline, BaselineP50: bv, BaselineP95: bv, Target: target, Met: met}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	pct := func(gaps []time.Duration, p float64) float64 { return ms(benchreport.Percentile(gaps, p)) }
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
		floor := got.floor
		fmt.Printf("rollout %s: %.2f owner changes per queue, floor %.2f (unversioned %.2f); by reason %v (unversioned %v); "+
			"gap per handover p50 %.1f p99 %.1f max %.1f ms, %d of %d over 50 ms (unversioned p99 %.1f ms); busiest %.2f x fair (unversioned %.2f); %v\n",
			kind, got.changesPerQueue, floor, base.changesPerQueue, got.reasons, base.reasons,
			pct(got.gaps, 50), pct(got.gaps, 99), pct(got.gaps, 100), overMs(got.gaps, 50), len(got.gaps), pct(base.gaps, 99),
			got.busiestShare, base.busiestShare, time.Since(began).Round(time.Second))
		n := fmt.Sprintf("rollout %s %dx%d", kind, rolloutWorkers, rolloutQueues)
		gap := benchreport.Figure{Name: n + ": leaderless gap per handover", Unit: "ms", Samples: len(got.gaps),
			P50: pct(got.gaps, 50), P95: pct(got.gaps, 95), P99: pct(got.gaps, 99),
			Baseline: baseline, BaselineP50: pct(base.gaps, 50), BaselineP95: pct(base.gaps, 95),
			Target: "p99 <= 50 ms", Met: pct(got.gaps, 99) <= 50}
		figs = append(figs,
			one(n+": owner changes per queue", "changes", got.changesPerQueue, base.changesPerQueue,
				fmt.Sprintf("<= %.2f (floor %.2f + 0.05)", floor+0.05, floor), got.changesPerQueue <= floor+0.05),
			gap,
			one(n+": busiest worker after the rollout", "x fair share", got.busiestShare, base.busiestShare, "<= 1.25", got.busiestShare <= 1.25))
	}
	return figs, nil
}

// overMs counts the gaps longer than limit milliseconds.
func overMs(gaps []time.Duration, limit int) int {
	n := 0
	for _, g := range gaps {
		if g > time.Duration(limit)*time.Millisecond {
			n++
		}
	}
	return n
}

package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// The rollout section: a rolling restart of 5 workers over 100 queues, each old worker replaced by a
// new one, either surge (the new one starts, then the old one stops) or stop-then-start. Versioned
// workers (v1 -> v2) are measured beside unversioned ones in the same run, on the same etcd: the same
// hand-overs (successor, drain, calm balancer) without forward-only, which shows what the version
// order adds. (Before #16 the balancer moved each queue 1.70-1.82 times per surge rollout and
// 1.33-1.35 times per stop-then-start; that balancer is gone, so it is no longer measured.)
const rolloutWorkers, rolloutQueues = 5, 100

// reasons sums the owner changes the fleet's balancers counted so far, by reason.
func reasons(ctx context.Context, reader *sdkmetric.ManualReader) (map[string]int64, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
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

// settleRollout waits until every queue is led, no worker leads more than limit, and neither the
// counts nor the terms started have changed for a second.
func settleRollout(ctx context.Context, f *fleet, limit int) error {
	counts, ok, err := settle(ctx, time.Second, 20*time.Millisecond, time.Minute, func() ([]int, bool, error) {
		counts := f.counts()
		f.mu.Lock()
		defer f.mu.Unlock()
		return append(counts, f.starts), f.led.Load() == int64(len(f.queues)) && slices.Max(counts) <= limit, nil
	})
	if err == nil && !ok {
		err = fmt.Errorf("not settled within a minute: leading, then terms started: %v", counts)
	}
	return cmp.Or(err, ctx.Err())
}

// noHandOffs waits until no hand-off is in flight: a hand-off hint lives from the decision until the
// term has ended (balance.Keys), and a shed decided before the rollout
// must not be counted as the rollout's.
func noHandOffs(ctx context.Context, f *fleet) error {
	cli, err := f.cluster.NewClient()
	if err != nil {
		return err
	}
	defer cli.Close()
	prefix := balance.Keys{ElectionPrefix: election.DefaultConfig().Prefix}.Hints(f.project)
	if err := harness.Poll(ctx, time.Minute, 20*time.Millisecond, func() error {
		resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err == nil && resp.Count > 0 {
			err = fmt.Errorf("%d hand-offs still in flight", resp.Count)
		}
		return err
	}); err != nil {
		return err
	}
	return settleRollout(ctx, f, len(f.queues))
}

type rolloutResult struct {
	changesPerQueue float64
	reasons         map[string]int64 // owner changes during the rollout by reason, as the balancer counted them
	gaps            []time.Duration  // per handover, sorted
	busiestShare    float64
	floor           float64 // the fewest owner changes per queue this rollout could make
}

func runRollout(ctx context.Context, cluster *etcdx.Cluster, project string, surge, versioned bool) (rolloutResult, error) {
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = meters.Shutdown(context.WithoutCancel(ctx)) }()
	// Nobody is cut off, so the workers dial etcd directly: a proxy's hop would add to the gaps.
	f := &fleet{cluster: cluster, project: project, queues: queueNames(rolloutQueues), ttl: 5 * time.Second,
		balance: true, direct: true, meters: meters}
	defer f.stopAll(ctx)
	v1, v2 := "", ""
	if versioned {
		v1, v2 = "v1", "v2"
	}
	for i := range rolloutWorkers {
		if _, err := f.start(ctx, fmt.Sprintf("old%d", i), v1); err != nil {
			return rolloutResult{}, err
		}
	}
	olds := slices.Clone(f.workers)
	if err := settleRollout(ctx, f, len(f.queues)); err != nil {
		return rolloutResult{}, err
	}
	// Let the start-up rebalancing finish (its cooldown) before the rollout is counted: shedding
	// stops once no worker leads more than ShedAbove (1.25) × its fair share.
	time.Sleep(6 * time.Second)
	if err := settleRollout(ctx, f, rolloutQueues/rolloutWorkers*5/4); err != nil {
		return rolloutResult{}, err
	}
	if err := noHandOffs(ctx, f); err != nil {
		return rolloutResult{}, err
	}
	f.mu.Lock()
	before := f.starts
	f.gaps = nil
	f.mu.Unlock()
	reasonsBefore, err := reasons(ctx, reader)
	if err != nil {
		return rolloutResult{}, err
	}
	// The floor: every queue moves to a new worker once. In a stop-then-start rollout the first
	// stopped worker's queues have no new worker to go to and move twice: 1 + 1/workers with an even
	// spread, more when the start-up left that worker above its fair share. (The last new worker then
	// leads nothing, within ShedAbove × fair share; spreading to it would move 1/workers more.)
	floor := 1.0
	if !surge {
		floor += float64(olds[0].leading.Load()) / float64(len(f.queues))
	}
	for i, old := range olds {
		if !surge {
			f.stop(ctx, old)
		}
		if _, err := f.start(ctx, fmt.Sprintf("new%d", i), v2); err != nil {
			return rolloutResult{}, err
		}
		if surge {
			time.Sleep(300 * time.Millisecond) // a new pod's readiness delay before the old one goes
			f.stop(ctx, old)
		}
		if err := settleRollout(ctx, f, len(f.queues)); err != nil {
			return rolloutResult{}, err
		}
	}
	// The balance after the rollout, including whatever rebalancing follows it.
	time.Sleep(6 * time.Second)
	if err := settleRollout(ctx, f, len(f.queues)); err != nil {
		return rolloutResult{}, err
	}
	by, err := reasons(ctx, reader)
	if err != nil {
		return rolloutResult{}, err
	}
	for k, n := range reasonsBefore {
		if by[k] -= n; by[k] == 0 {
			delete(by, k)
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	slices.Sort(f.gaps)
	return rolloutResult{changesPerQueue: float64(f.starts-before) / float64(len(f.queues)), reasons: by,
		gaps: f.gaps, busiestShare: float64(slices.Max(f.counts())) / (float64(len(f.queues)) / rolloutWorkers), floor: floor}, nil
}

func benchRollout(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	var figs []benchreport.Figure
	const baseline = "unversioned workers (no forward-only)"
	pct := func(gaps []time.Duration, p float64) float64 { return benchreport.Ms(benchreport.Percentile(gaps, p)) }
	for _, surge := range []bool{true, false} {
		kind := "stop-then-start"
		if surge {
			kind = "surge"
		}
		began := time.Now()
		base, err := runRollout(ctx, s.cluster, "rollout-base-"+kind, surge, false)
		if err != nil {
			return nil, fmt.Errorf("%s unversioned: %w", kind, err)
		}
		got, err := runRollout(ctx, s.cluster, "rollout-"+kind, surge, true)
		if err != nil {
			return nil, fmt.Errorf("%s versioned: %w", kind, err)
		}
		floor := got.floor
		within50, _ := slices.BinarySearch(got.gaps, 50*time.Millisecond+1) // the gaps are sorted
		fmt.Printf("rollout %s: %.2f owner changes per queue, floor %.2f (unversioned %.2f); by reason %v (unversioned %v); "+
			"gap per handover p50 %.1f p99 %.1f max %.1f ms, %d of %d over 50 ms (unversioned p99 %.1f ms); busiest %.2f x fair (unversioned %.2f); %v\n",
			kind, got.changesPerQueue, floor, base.changesPerQueue, got.reasons, base.reasons,
			pct(got.gaps, 50), pct(got.gaps, 99), pct(got.gaps, 100), len(got.gaps)-within50, len(got.gaps), pct(base.gaps, 99),
			got.busiestShare, base.busiestShare, time.Since(began).Round(time.Second))
		n := fmt.Sprintf("rollout %s %dx%d", kind, rolloutWorkers, rolloutQueues)
		figs = append(figs,
			benchreport.Single(n+": owner changes per queue", "changes", got.changesPerQueue, baseline, base.changesPerQueue,
				fmt.Sprintf("<= %.2f (floor %.2f + 0.05)", floor+0.05, floor), got.changesPerQueue <= floor+0.05),
			benchreport.NewFigure(n+": leaderless gap per handover", "ms", benchreport.Millis(got.gaps), baseline,
				benchreport.Millis(base.gaps), "p99 <= 50 ms", func(f benchreport.Figure) bool { return f.P99 <= 50 }),
			benchreport.Single(n+": busiest worker after the rollout", "x fair share", got.busiestShare, baseline, base.busiestShare,
				"<= 1.25", got.busiestShare <= 1.25))
	}
	return figs, nil
}

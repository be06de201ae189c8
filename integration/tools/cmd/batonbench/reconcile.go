package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// benchProject is the project of the reconcile, takeover, replacement and dispatch sections;
// sweepProject keeps the sweep's runs apart from the reconcile section's.
const benchProject, sweepProject = "bench", "sweep"

// cycleFigures are a reconcile section's two figures: a cycle's duration, within 2 s, and the calls it
// makes (their unit "calls"), which callsMet judges.
func cycleFigures(name, baseline string, ms, baseMs, calls, baseCalls []float64, callsName, callsTarget string,
	callsMet func(benchreport.Figure) bool) []benchreport.Figure {
	return []benchreport.Figure{
		benchreport.NewFigure(name, "ms", ms, baseline, baseMs, "p95 <= 2000 ms", func(f benchreport.Figure) bool { return f.P95 <= 2000 }),
		benchreport.NewFigure(name+": "+callsName, "calls", calls, baseline, baseCalls, callsTarget, callsMet),
	}
}

// benchReconcile measures reconcile cycles over o.heartbeats entries on a real redis-server, 1 % of
// them stale, against a real etcd (leader lookups, the reconciler's fencing) and a real Temporal
// server (each stale run's terminate is a real call; the runs are already gone, so it answers
// NotFound, which counts as done). The baseline is a naive loop over the same data in the same run:
// KEYS, then one HGETALL per key, then terminate and DEL per stale entry. The termination rate limit is
// lifted: the figure is the cycle's own cost (with the default 20/s, a 1,000-run backlog drains in 50 s).
// The same cycles then run on a 3-master Redis Cluster, beside the single server's.
func benchReconcile(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	queues, err := s.elector(s.etcd, election.Config{})
	if err != nil {
		return nil, err
	}
	term, err := s.reconcilerTerm(s.etcd, benchProject)
	if err != nil {
		return nil, err
	}
	ours, oursCalls, err := reconcileCycles(ctx, s.rdb, s.tc, queues, term, o, "")
	if err != nil {
		return nil, err
	}
	var naive, naiveCalls []float64
	for range o.naiveRounds {
		if err := writeEntries(ctx, s.rdb, o.heartbeats, true); err != nil {
			return nil, err
		}
		d, calls, deleted, err := naiveCycle(ctx, s.rdb, s.tc)
		if err != nil {
			return nil, err
		}
		if deleted != o.heartbeats/100 {
			return nil, fmt.Errorf("naive cycle deleted %d, want %d", deleted, o.heartbeats/100)
		}
		naive, naiveCalls = append(naive, benchreport.Ms(d)), append(naiveCalls, float64(calls))
	}

	rc, err := redisx.StartClusterServers(redisx.ClusterOptions{Masters: 3})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	cc := rc.NewClient()
	defer cc.Close()
	onCluster, clusterCalls, err := reconcileCycles(ctx, cc, s.tc, queues, term, o, " on a 3-master cluster")
	if err != nil {
		return nil, fmt.Errorf("on Redis Cluster: %w", err)
	}
	name := fmt.Sprintf("reconcile cycle, %dk heartbeats, 1%% stale", o.heartbeats/1000)
	return append(cycleFigures(name, "naive KEYS + HGETALL loop", ours, naive, oursCalls, naiveCalls, "Redis round trips",
		">= 10x fewer than the naive loop", func(f benchreport.Figure) bool { return f.P95*10 <= f.BaselineP50 }),
		cycleFigures(name+", Redis Cluster (3 masters)", "one redis-server", onCluster, ours, clusterCalls, oursCalls, "Redis round trips",
			"within 10 % of one server's", func(f benchreport.Figure) bool { return f.P95 <= 1.1*f.BaselineP50 })...), nil
}

// reconcileCycles writes o.heartbeats entries to rdb, then measures o.reconcileRounds cycles of a
// reconciler on rdb, each after the previous cycle's deleted stale entries are written again. It
// returns each cycle's duration (ms) and Redis round trips.
func reconcileCycles(ctx context.Context, rdb redis.UniversalClient, tc client.Client, queues *election.Elector, term reconciler.Term,
	o options, where string) (ms, calls []float64, _ error) {
	rec, err := reconciler.New(reconciler.Config{Project: benchProject, ServerID: "bench-reconciler",
		TerminateRate: 1e6, TerminateBurst: 1000, Workers: 8}, rdb, tc, queues)
	if err != nil {
		return nil, nil, err
	}
	stale := o.heartbeats / 100
	fmt.Printf("batonbench: reconcile: writing %d heartbeat entries (%d stale)%s\n", o.heartbeats, stale, where)
	if err := writeEntries(ctx, rdb, o.heartbeats, false); err != nil {
		return nil, nil, err
	}
	for round := range o.reconcileRounds {
		if err := writeEntries(ctx, rdb, o.heartbeats, true); err != nil {
			return nil, nil, err
		}
		rep, err := rec.Cycle(ctx, term)
		if err != nil {
			return nil, nil, fmt.Errorf("reconcile cycle %d: %w", round, err)
		}
		if rep.Scanned != o.heartbeats || rep.Stale != stale || rep.Deleted != stale || rep.CleanupErrors != 0 {
			return nil, nil, fmt.Errorf("reconcile cycle %d: scanned %d, stale %d, deleted %d, errors %d; want %d, %d, %d, 0",
				round, rep.Scanned, rep.Stale, rep.Deleted, rep.CleanupErrors, o.heartbeats, stale, stale)
		}
		ms, calls = append(ms, benchreport.Ms(rep.Duration)), append(calls, float64(rep.RedisCalls))
	}
	return ms, calls, nil
}

// writeEntries writes n dispatcher heartbeats of benchProject with pipelines; every 100th is an hour
// old. With onlyStale it rewrites just those (a cycle deleted them).
func writeEntries(ctx context.Context, rdb redis.UniversalClient, n int, onlyStale bool) error {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	pipe := rdb.Pipeline()
	for i := range n {
		isStale := i%100 == 0
		if onlyStale && !isStale {
			continue
		}
		queue := fmt.Sprintf("q%06d", i)
		id, err := takeover.WorkflowID(benchProject, queue)
		if err != nil {
			return err
		}
		// The fresh ones are dated an hour ahead: they stay fresh however long a loaded machine
		// takes over the cycles.
		at := now.Add(time.Hour)
		if isStale {
			at = now.Add(-time.Hour)
		}
		pipe.HSet(ctx, heartbeat.Key("", benchProject, id), heartbeat.FieldWorkflowID, id,
			heartbeat.FieldRunID, fmt.Sprintf("00000000-0000-4000-8000-%012d", i), heartbeat.FieldServerID, "bench-owner",
			heartbeat.FieldToken, strconv.Itoa(i+1), heartbeat.FieldProject, benchProject, heartbeat.FieldQueue, queue,
			heartbeat.FieldUpdatedMs, strconv.FormatInt(at.UnixMilli(), 10), heartbeat.FieldVersion, "1")
		if pipe.Len() >= 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	_, err = pipe.Exec(ctx)
	return err
}

// naiveCycle is what a reconciler written without care does: KEYS, one read per key, and for each
// stale entry a terminate and a DEL. It returns how long it took, its Redis calls and its deletes.
func naiveCycle(ctx context.Context, rdb *redis.Client, tc client.Client) (time.Duration, int, int, error) {
	start := time.Now()
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return 0, 0, 0, err
	}
	keys, err := rdb.Keys(ctx, heartbeat.DefaultPrefix+"*").Result()
	if err != nil {
		return 0, 0, 0, err
	}
	calls, deleted := 2+len(keys), 0
	for _, k := range keys {
		fields, err := rdb.HGetAll(ctx, k).Result()
		if err != nil {
			return 0, 0, 0, err
		}
		e, err := heartbeat.Decode(heartbeat.DefaultPrefix, k, fields)
		if err != nil || e.Project != benchProject || e.Age(now) <= 30*time.Second {
			continue
		}
		var notFound *serviceerror.NotFound
		if err := tc.TerminateWorkflow(ctx, e.WorkflowID, e.RunID, "naive reconcile"); err != nil && !errors.As(err, &notFound) {
			return 0, 0, 0, err
		}
		if err := rdb.Del(ctx, k).Err(); err != nil {
			return 0, 0, 0, err
		}
		calls, deleted = calls+1, deleted+1
	}
	return time.Since(start), calls, deleted, nil
}

// benchSweep measures the reconciler's Temporal-side sweep over o.sweepRuns open dispatcher runs, each
// the run of its queue's live leader (the steady state a sweep meets every cycle: nothing to end), on
// the bench's Temporal server and the bench's etcd. A whole reconcile cycle is timed; its Redis half
// scans an empty server. The baseline, in the same run over the same runs, decides each listed run with
// a leader lookup of its own, one etcd read per run.
// sweepNeeds are the sweep's servers. The test server reads the namespace from persistence for every
// listed run (temporal-dev, as temporaltest, turns this on so that tests see new search attributes at
// once): 1 ms a run, the test server's cost, not the sweep's. A production server answers from its
// namespace cache.
var sweepNeeds = need{redis: true, temporal: true, etcd: true,
	temporalConfig: map[string]any{"system.forceSearchAttributesCacheRefreshOnRead": false}}

func benchSweep(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	tc := s.tc
	// The leader lookups go through a client of their own whose range reads are counted.
	var ranges atomic.Int64
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{counting(&ranges, func(m string) bool { return m == "/etcdserverpb.KV/Range" })}})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, cli.Close)
	queues, err := s.elector(cli, election.Config{})
	if err != nil {
		return nil, err
	}
	// The runs' leaders and the reconciler's term are on the bench's own client, uncounted.
	ownerEl, err := s.elector(s.etcd, election.Config{})
	if err != nil {
		return nil, err
	}
	term, err := s.reconcilerTerm(s.etcd, sweepProject)
	if err != nil {
		return nil, err
	}
	rec, err := reconciler.New(reconciler.Config{Project: sweepProject, ServerID: "bench-reconciler"}, s.rdb, tc, queues)
	if err != nil {
		return nil, err
	}

	n := o.sweepRuns
	fmt.Printf("batonbench: sweep: %d queues elected and their dispatcher runs started\n", n)
	setup := time.Now()
	// Elected and started several at once; each run's task queue has no poller, so the runs stay open.
	if err := harness.Parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		return startLedRun(ctx, ownerEl, tc, fmt.Sprintf("q%06d", i))
	}); err != nil {
		return nil, err
	}
	started := time.Since(setup)
	query := fmt.Sprintf("WorkflowId STARTS_WITH %s AND ExecutionStatus = 'Running'", strconv.Quote(takeover.WorkflowIDPrefix(sweepProject)))
	// A run is listed only once it is indexed, a moment after its start.
	if err := harness.Poll(ctx, 5*time.Minute, 200*time.Millisecond, func() error {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err == nil && resp.GetCount() < int64(n) {
			err = fmt.Errorf("visibility indexed %d of %d runs", resp.GetCount(), n)
		}
		return err
	}); err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: sweep: set-up %v (%v to elect and start, then visibility indexing)\n",
		time.Since(setup).Round(time.Millisecond), started.Round(time.Millisecond))

	var ours, oursReads, naive, naiveReads []float64
	for round := range o.sweepRounds {
		ranges.Store(0)
		rep, err := rec.Cycle(ctx, term)
		if err != nil {
			return nil, fmt.Errorf("sweep cycle %d: %w", round, err)
		}
		if rep.Open != n || rep.Orphans != 0 || rep.Undecided != 0 || rep.CleanupErrors != 0 {
			return nil, fmt.Errorf("sweep cycle %d: open %d, orphans %d, undecided %d, errors %d; want %d, 0, 0, 0",
				round, rep.Open, rep.Orphans, rep.Undecided, rep.CleanupErrors, n)
		}
		ours, oursReads = append(ours, benchreport.Ms(rep.Duration)), append(oursReads, float64(ranges.Load()))
		fmt.Printf("batonbench: sweep: cycle %d: %v, %d visibility pages, %d etcd reads\n",
			round, rep.Duration.Round(time.Millisecond), rep.TemporalCalls, ranges.Load())
	}
	for round := range o.sweepNaiveRounds {
		ranges.Store(0)
		d, own, err := naiveSweep(ctx, tc, queues, query)
		if err == nil && own != n {
			err = fmt.Errorf("%d runs of their leader, want %d", own, n)
		}
		if err != nil {
			return nil, fmt.Errorf("naive sweep %d: %w", round, err)
		}
		naive, naiveReads = append(naive, benchreport.Ms(d)), append(naiveReads, float64(ranges.Load()))
	}
	return cycleFigures(fmt.Sprintf("reconcile sweep, %d open dispatcher runs", n), "a leader lookup per run",
		ours, naive, oursReads, naiveReads, "etcd reads", "1 per cycle", func(f benchreport.Figure) bool { return f.P99 == 1 }), nil
}

// startLedRun elects el for queue of sweepProject and starts the queue's dispatcher run with its
// leader's owner memo.
func startLedRun(ctx context.Context, el *election.Elector, tc client.Client, queue string) error {
	term, err := el.Campaign(ctx, sweepProject, queue, "bench-owner")
	if err != nil {
		return err
	}
	id, err := takeover.WorkflowID(sweepProject, queue)
	if err != nil {
		return err
	}
	owner := takeover.Owner{Project: sweepProject, Queue: queue, ServerID: "bench-owner", Token: term.Token(),
		ElectionKey: term.Key(), TakeoverStartedAt: time.Now()}
	_, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "batonbench-sweep-nobody-polls",
		Memo: map[string]any{takeover.MemoKey: owner}}, takeover.DefaultWorkflowType, owner)
	return err
}

// naiveSweep is the sweep as first written: the same paginated listing, then one leader lookup per
// run. It returns how long it took and how many runs were their queue's leader's.
func naiveSweep(ctx context.Context, tc client.Client, el *election.Elector, query string) (time.Duration, int, error) {
	start, own := time.Now(), 0
	for req := (&workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 500}); ; {
		resp, err := tc.ListWorkflow(ctx, req)
		if err != nil {
			return 0, 0, err
		}
		for _, ex := range resp.GetExecutions() {
			owner, found, err := takeover.DecodeOwner(nil, ex.GetMemo())
			if err != nil || !found {
				return 0, 0, fmt.Errorf("run %s: owner memo: found %v, %v", ex.GetExecution().GetWorkflowId(), found, err)
			}
			leader, err := el.Leader(ctx, owner.Project, owner.Queue)
			if err != nil {
				return 0, 0, err
			}
			if leader.Token == owner.Token {
				own++
			}
		}
		if req.NextPageToken = resp.GetNextPageToken(); len(req.NextPageToken) == 0 {
			return time.Since(start), own, nil
		}
	}
}

package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/testkit"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// sweepProject keeps the sweep's runs apart from the reconcile section's.
const sweepProject = "sweep"

// benchSweep measures the reconciler's Temporal-side sweep over o.sweepRuns open dispatcher runs, each
// the run of its queue's live leader (the steady state a sweep meets every cycle: nothing to end), on
// the bench's Temporal server and the bench's etcd. A whole reconcile cycle is timed; its Redis half
// scans an empty server. The baseline, in the same run over the same runs, decides each listed run with
// a leader lookup of its own, one etcd read per run.
func benchSweep(ctx context.Context, cluster *etcdtest.Cluster, o options) ([]benchreport.Figure, error) {
	// The test server reads the namespace from persistence for every listed run (temporal-dev, as
	// temporaltest, turns this on so that tests see new search attributes at once): 1 ms a run, the
	// test server's cost, not the sweep's. A production server answers from its namespace cache.
	s, err := startServers(ctx, cluster, need{redis: true, temporal: true,
		temporalConfig: map[string]any{"system.forceSearchAttributesCacheRefreshOnRead": false}})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	tc := s.tc
	// The leader lookups go through a client of their own whose range reads are counted.
	var ranges atomic.Int64
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{counting(&ranges, func(m string) bool { return m == "/etcdserverpb.KV/Range" })}})
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, cli.Close)
	queues, err := s.elector(cli, election.Config{})
	if err != nil {
		return nil, err
	}
	owners, err := s.etcdClient()
	if err != nil {
		return nil, err
	}
	ownerEl, err := s.elector(owners, election.Config{})
	if err != nil {
		return nil, err
	}
	term, err := s.reconcilerTerm(owners, sweepProject)
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
	if err := testkit.Parallel(ctx, n, 32, func(ctx context.Context, i int) error {
		return startLedRun(ctx, ownerEl, tc, fmt.Sprintf("q%06d", i))
	}); err != nil {
		return nil, err
	}
	started := time.Since(setup)
	query := fmt.Sprintf("WorkflowId STARTS_WITH %s AND ExecutionStatus = 'Running'", strconv.Quote(takeover.WorkflowIDPrefix(sweepProject)))
	// A run is listed only once it is indexed, a moment after its start.
	if err := testkit.Poll(ctx, 5*time.Minute, 200*time.Millisecond, func() error {
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
		ours = append(ours, benchreport.Ms(rep.Duration))
		oursReads = append(oursReads, float64(ranges.Load()))
		fmt.Printf("batonbench: sweep: cycle %d: %v, %d visibility pages, %d etcd reads\n",
			round, rep.Duration.Round(time.Millisecond), rep.TemporalCalls, ranges.Load())
	}
	for round := range o.sweepNaiveRounds {
		ranges.Store(0)
		d, own, err := naiveSweep(ctx, tc, queues, query)
		if err != nil {
			return nil, fmt.Errorf("naive sweep %d: %w", round, err)
		}
		if own != n {
			return nil, fmt.Errorf("naive sweep %d: %d runs of their leader, want %d", round, own, n)
		}
		naive = append(naive, benchreport.Ms(d))
		naiveReads = append(naiveReads, float64(ranges.Load()))
	}
	name := fmt.Sprintf("reconcile sweep, %d open dispatcher runs", n)
	return []benchreport.Figure{
		benchreport.NewFigure(name, "ms", ours, "a leader lookup per run", naive, "p95 <= 2000 ms",
			func(f benchreport.Figure) bool { return f.P95 <= 2000 }),
		benchreport.NewFigure(name+": etcd reads", "calls", oursReads, "a leader lookup per run", naiveReads,
			"1 per cycle", func(f benchreport.Figure) bool { return f.P99 == 1 }),
	}, nil
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
	start := time.Now()
	own := 0
	var token []byte
	for {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, PageSize: 500, NextPageToken: token})
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
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return time.Since(start), own, nil
		}
	}
}

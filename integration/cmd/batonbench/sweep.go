package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
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
	"github.com/baton-run/baton/integration/temporalx"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// sweepProject keeps the sweep's runs apart from the reconcile section's.
const sweepProject = "sweep"

// benchSweep measures the reconciler's Temporal-side sweep over o.sweepRuns open dispatcher runs, each
// the run of its queue's live leader (the steady state a sweep meets every cycle: nothing to end), on
// the in-process Temporal server and the bench's etcd. A whole reconcile cycle is timed; its Redis half
// scans an empty server. The baseline, in the same run over the same runs, decides each listed run with
// a leader lookup of its own, one etcd read per run.
func benchSweep(ctx context.Context, cluster *etcdtest.Cluster, o options) ([]benchreport.Figure, error) {
	began := time.Now()
	s, err := startServers(cluster, need{redis: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	// The test server reads the namespace from persistence for every listed run (temporaltest turns
	// this on so that tests see new search attributes at once): 1 ms a run, the test server's cost,
	// not the sweep's. A production server answers from its namespace cache.
	ts, err := temporalx.StartServer(temporalx.Options{DynamicConfig: map[string]any{"system.forceSearchAttributesCacheRefreshOnRead": false}})
	if err != nil {
		return nil, err
	}
	defer ts.Close()
	tc, err := ts.NewClient()
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	// The leader lookups go through a client of their own whose range reads are counted.
	var ranges atomic.Int64
	cli, err := clientv3.New(clientv3.Config{Endpoints: cluster.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/etcdserverpb.KV/Range" {
					ranges.Add(1)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})}})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	closeEl := func(el *election.Elector) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_ = el.Close(cctx)
	}
	queues, err := election.New(cli, election.Config{})
	if err != nil {
		return nil, err
	}
	defer closeEl(queues)
	owners, err := cluster.NewClient()
	if err != nil {
		return nil, err
	}
	defer owners.Close()
	ownerEl, err := election.New(owners, election.Config{})
	if err != nil {
		return nil, err
	}
	defer closeEl(ownerEl)
	recEl, err := election.New(owners, election.Config{Prefix: reconciler.DefaultElectionPrefix})
	if err != nil {
		return nil, err
	}
	defer closeEl(recEl)
	term, err := recEl.Campaign(ctx, sweepProject, reconciler.ElectionQueue, "bench-reconciler")
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
	if err := startLedRuns(ctx, ownerEl, tc, n); err != nil {
		return nil, err
	}
	started := time.Since(setup)
	query := fmt.Sprintf("WorkflowId STARTS_WITH %s AND ExecutionStatus = 'Running'", strconv.Quote(takeover.WorkflowIDPrefix(sweepProject)))
	if err := waitIndexed(ctx, tc, query, n); err != nil {
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
		ours = append(ours, float64(rep.Duration)/float64(time.Millisecond))
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
		naive = append(naive, float64(d)/float64(time.Millisecond))
		naiveReads = append(naiveReads, float64(ranges.Load()))
	}
	fmt.Printf("batonbench: sweep: section took %v\n", time.Since(began).Round(time.Millisecond))
	name := fmt.Sprintf("reconcile sweep, %d open dispatcher runs", n)
	return []benchreport.Figure{
		benchreport.NewFigure(name, "ms", ours, "a leader lookup per run", naive, "p95 <= 2000 ms",
			func(f benchreport.Figure) bool { return f.P95 <= 2000 }),
		benchreport.NewFigure(name+": etcd reads", "calls", oursReads, "a leader lookup per run", naiveReads,
			"1 per cycle", func(f benchreport.Figure) bool { return f.P99 == 1 }),
	}, nil
}

// startLedRuns elects el for n queues of sweepProject and starts each queue's dispatcher run with its
// leader's owner memo, on a task queue nobody polls (the runs stay open), several at once.
func startLedRuns(ctx context.Context, el *election.Elector, tc client.Client, n int) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 32 {
		wg.Go(func() {
			for i := range next {
				if err := startLedRun(ctx, el, tc, fmt.Sprintf("q%06d", i)); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

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

// waitIndexed waits until Temporal visibility counts want runs for query: a run is listed only once
// it is indexed, a moment after its start.
func waitIndexed(ctx context.Context, tc client.Client, query string, want int) error {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err == nil && resp.GetCount() >= int64(want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("visibility indexed %d of %d runs in 5 minutes (last error %v)", resp.GetCount(), want, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
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

package main

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/redistest"
	"github.com/baton-run/baton/integration/temporalx"
	"github.com/baton-run/baton/takeover"
)

// benchReplace measures how soon a leader replaces a dispatcher run that an operator terminated
// behind its back: from the terminate call to the leader's status showing a new open run in the
// same term. It runs one real Node (embedded etcd, in-process Temporal, redis-server; reconciler and
// worker registry on) that leads o.replacements queues, so every sample is the first close of its
// term, as an operator's terminate in production is: a term backs off further on each close after the
// first (Takeover.RetryMin doubling up to RetryMax), which bounds a workflow that keeps failing, not
// the time to recover from one close. The Node's heartbeat interval is o.replaceHeartbeat; its watch
// interval defaults to it, which bounds how late a close can be seen when the long poll is not woken.
//
// Each replacement is checked in Temporal: the workflow's current run is the one the Node reports,
// running, with the term's token and the Node's server ID in its memo, and the terminated run is
// terminated. The baseline is the floor of any replacement: the same client terminating an aged run
// and starting its workflow ID again at once, with nothing to notice the close.
func benchReplace(ctx context.Context, cluster *etcdtest.Cluster, o options) ([]benchreport.Figure, error) {
	switch {
	case o.replacements < 1:
		return nil, fmt.Errorf("-replacements must be at least 1, got %d", o.replacements)
	case o.replaceHeartbeat <= 0:
		return nil, fmt.Errorf("-replace-heartbeat must be positive, got %v", o.replaceHeartbeat)
	}
	rs, err := redistest.StartServer(redistest.Options{})
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	rdb := rs.NewClient()
	defer rdb.Close()
	srv, err := temporalx.StartServer(temporalx.Options{})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	tc, err := srv.NewClient()
	if err != nil {
		return nil, err
	}
	defer tc.Close()
	cli, err := cluster.NewClient()
	if err != nil {
		return nil, err
	}
	defer cli.Close()

	queues := make([]string, o.replacements)
	for i := range queues {
		queues[i] = fmt.Sprintf("rq-%03d", i)
	}
	const serverID = "bench-leader"
	node, err := baton.New(baton.Config{Project: benchProject + "-replace", Queues: queues, ServerID: serverID,
		Heartbeat: heartbeat.Config{Interval: o.replaceHeartbeat}}, cli, tc, rdb)
	if err != nil {
		return nil, err
	}
	hb, watch := node.Config().Heartbeat.Interval, node.Config().Takeover.WatchInterval
	fmt.Printf("batonbench: replacement: one Node leading %d queues, heartbeat %v, watch interval %v\n",
		len(queues), hb, watch)
	if err := node.Start(ctx); err != nil {
		return nil, err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := node.Stop(sctx); err != nil {
			fmt.Println("batonbench: replacement: stopping the node:", err)
		}
	}()

	// The baseline's runs, started beside the Node's first runs and aged with them.
	bareID := func(i int) string { return fmt.Sprintf("bare-replace-%03d", i) }
	bareRuns := make([]string, len(queues))
	for i := range queues {
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: bareID(i), TaskQueue: "bare"}, takeover.DefaultWorkflowType)
		if err != nil {
			return nil, err
		}
		bareRuns[i] = run.GetRunID()
	}
	if err := waitFor(ctx, time.Minute, "every queue led with an open dispatcher run", func() error {
		for _, q := range queues {
			if qs, ok := queueStatus(node, q); !ok || !qs.Leading || !qs.DispatcherOpen {
				return fmt.Errorf("%s: %+v", q, qs)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// Temporal refuses a same-ID start within about 1 s of the previous one; the run an operator
	// terminates has been running for longer.
	time.Sleep(1100 * time.Millisecond)

	// Replacement normally takes a backoff of RetryMin (jittered) and a takeover; a close that is not
	// seen at once waits for the watch interval too. Past this something is broken, not slow.
	limit := watch + 30*time.Second
	var ours, bare, seen, closed []time.Duration
	for i, q := range queues {
		before, _ := queueStatus(node, q)
		if err := checkOwned(ctx, tc, before.WorkflowID, before.RunID, before.Token, serverID); err != nil {
			return nil, fmt.Errorf("%s before the terminate: %w", q, err)
		}
		start := time.Now()
		if err := tc.TerminateWorkflow(ctx, before.WorkflowID, before.RunID, "batonbench: operator"); err != nil {
			return nil, err
		}
		var after baton.QueueStatus
		var noticed time.Duration
		for {
			var ok bool
			after, ok = queueStatus(node, q)
			if noticed == 0 && ok && (after.Replacements > before.Replacements || after.RunID != before.RunID) {
				noticed = time.Since(start)
			}
			if ok && after.DispatcherOpen && after.RunID != before.RunID {
				break
			}
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if since := time.Since(start); since > limit {
				return nil, fmt.Errorf("%s: run %s not replaced %v after its terminate: %+v", q, before.RunID, since, after)
			}
			time.Sleep(time.Millisecond)
		}
		ours, seen = append(ours, time.Since(start)), append(seen, noticed)
		if !after.Leading || after.Token != before.Token || after.Replacements != before.Replacements+1 {
			return nil, fmt.Errorf("%s: not a replacement within the term: before %+v, after %+v", q, before, after)
		}
		if err := checkOwned(ctx, tc, after.WorkflowID, after.RunID, after.Token, serverID); err != nil {
			return nil, fmt.Errorf("%s after the replacement: %w", q, err)
		}
		old, err := tc.DescribeWorkflowExecution(ctx, before.WorkflowID, before.RunID)
		if err != nil {
			return nil, err
		}
		if status := old.GetWorkflowExecutionInfo().GetStatus(); status != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return nil, fmt.Errorf("%s: the terminated run %s is %v", q, before.RunID, status)
		}
		// The server runs in this process: its close time is on the same clock.
		closed = append(closed, old.GetWorkflowExecutionInfo().GetCloseTime().AsTime().Sub(start))

		start = time.Now()
		if err := tc.TerminateWorkflow(ctx, bareID(i), bareRuns[i], "batonbench: operator"); err != nil {
			return nil, err
		}
		if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: bareID(i), TaskQueue: "bare"}, takeover.DefaultWorkflowType); err != nil {
			return nil, err
		}
		bare = append(bare, time.Since(start))
	}
	targetMS, watchMS := float64((hb + time.Second).Milliseconds()), float64(watch.Milliseconds())
	name := fmt.Sprintf("replacement after an operator's terminate, Node with heartbeat %v and watch interval %v", hb, watch)
	return []benchreport.Figure{
		benchreport.NewFigure(name+" (terminate -> leader's new run open, same term)", "ms", benchreport.Millis(ours),
			"bare TerminateWorkflow + StartWorkflow (nothing to notice)", benchreport.Millis(bare),
			fmt.Sprintf("p95 <= heartbeat + 1 s = %.0f ms", targetMS), func(f benchreport.Figure) bool { return f.P95 <= targetMS }),
		benchreport.NewFigure(name+": of which terminate -> close noticed (status: replacing)", "ms", benchreport.Millis(seen),
			"terminate -> run closed (Temporal's close time)", benchreport.Millis(closed),
			fmt.Sprintf("p95 <= watch interval = %.0f ms", watchMS), func(f benchreport.Figure) bool { return f.P95 <= watchMS }),
	}, nil
}

// queueStatus is the Node's view of one queue.
func queueStatus(n *baton.Node, queue string) (baton.QueueStatus, bool) {
	for _, qs := range n.Status().Queues {
		if qs.Queue == queue {
			return qs, true
		}
	}
	return baton.QueueStatus{}, false
}

// waitFor polls f every 10 ms until it returns nil, or fails naming what and f's last error.
func waitFor(ctx context.Context, d time.Duration, what string, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v: %w", what, d, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/takeover"
)

// benchReplace measures how soon a leader replaces a dispatcher run that an operator terminated
// behind its back: from the terminate call to the leader's status showing a new open run in the
// same term. Each round runs one real Node (embedded etcd, Temporal, redis-server;
// reconciler and worker registry on) that leads o.replacements queues, so every sample is the first
// close of its term, as an operator's terminate in production is: a term backs off further on each
// close after the first (Takeover.RetryMin doubling up to RetryMax), which bounds a workflow that
// keeps failing, not the time to recover from one close. There is one round per heartbeat interval
// in o.replaceHeartbeats (0 is the Node's default); the watch interval is the Node's default for it
// (the heartbeat interval), which bounds how late a close is seen when the long poll is not woken.
//
// Each replacement is checked in Temporal: the workflow's current run is the one the Node reports,
// running, with the term's token and the Node's server ID in its memo, and the terminated run is
// terminated. The baseline is the floor of any replacement, measured while the Node runs: the same
// client terminating an aged run and starting its workflow ID again at once, with nothing to notice.
func benchReplace(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	if o.replacements < 1 {
		return nil, fmt.Errorf("-replacements must be at least 1, got %d", o.replacements)
	}
	var figures []benchreport.Figure
	for round, hb := range o.replaceHeartbeats {
		f, err := replaceRound(ctx, s, fmt.Sprintf("%s-replace-%d", benchProject, round), hb, o.replacements)
		if err != nil {
			return nil, err
		}
		figures = append(figures, f...)
	}
	return figures, nil
}

// replaceRound is one round of benchReplace: a Node of project with heartbeat interval hb (0: the
// default) leading n queues, and one out-of-band terminate per queue. The Node has a Temporal client
// of its own, whose calls are counted while it rests: supervising a run costs one long poll and one
// describe per watch interval by design.
func replaceRound(ctx context.Context, s *servers, project string, hb time.Duration, n int) ([]benchreport.Figure, error) {
	tc := s.tc
	var calls atomic.Int64
	nodeTC, err := s.temporal.NewClient(func(co *client.Options) {
		co.ConnectionOptions.DialOptions = append(co.ConnectionOptions.DialOptions, counting(&calls, func(string) bool { return true }))
	})
	if err != nil {
		return nil, err
	}
	defer nodeTC.Close()
	queues := queueNames(n)
	const serverID = "bench-leader"
	node, err := baton.New(baton.Config{Project: project, Queues: queues, ServerID: serverID,
		Heartbeat: heartbeat.Config{Interval: hb},
		// Its runs have no worker, and the section counts the Node's Temporal calls for replacements.
		Progress: progress.Config{Disabled: true}}, s.etcd, nodeTC, s.rdb)
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
	bareID := func(i int) string { return fmt.Sprintf("bare-%s-%03d", project, i) }
	bareRuns := make([]string, len(queues))
	for i := range queues {
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: bareID(i), TaskQueue: "bare"}, takeover.DefaultWorkflowType)
		if err != nil {
			return nil, err
		}
		bareRuns[i] = run.GetRunID()
	}
	if err := harness.Poll(ctx, time.Minute, 10*time.Millisecond, func() error {
		for _, q := range queues {
			if qs, ok := queueStatus(node, q); !ok || !qs.Leading || !qs.DispatcherOpen {
				return fmt.Errorf("%s not led with an open dispatcher run: %+v", q, qs)
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	// At rest for two watch intervals, which also ages the runs: Temporal refuses a same-ID start
	// within about 1 s of the previous one, and the run an operator terminates has been running longer.
	calls.Store(0)
	rest := time.Now()
	time.Sleep(max(2*watch, 1100*time.Millisecond))
	perQueue := float64(calls.Load()) / float64(n) / time.Since(rest).Seconds()

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
		if err := harness.Poll(ctx, limit, time.Millisecond, func() error {
			var ok bool
			after, ok = queueStatus(node, q)
			if noticed == 0 && ok && (after.Replacements > before.Replacements || after.RunID != before.RunID) {
				noticed = time.Since(start)
			}
			if !ok || !after.DispatcherOpen || after.RunID == before.RunID {
				return fmt.Errorf("%s: run %s not replaced after its terminate: %+v", q, before.RunID, after)
			}
			return nil
		}); err != nil {
			return nil, err
		}
		ours, seen = append(ours, time.Since(start)), append(seen, noticed)
		if !after.Leading || after.Token != before.Token || after.Replacements != before.Replacements+1 {
			return nil, fmt.Errorf("%s: not a replacement within the term: before %+v, after %+v", q, before, after)
		}
		if err := checkOwned(ctx, tc, after.WorkflowID, after.RunID, after.Token, serverID); err != nil {
			return nil, fmt.Errorf("%s after the replacement: %w", q, err)
		}
		closedAt, err := terminated(ctx, tc, before.WorkflowID, before.RunID)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		// The server runs on this host: its close time is on the same clock.
		closed = append(closed, closedAt.Sub(start))

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
	name := fmt.Sprintf("replacement of a run terminated out of band (Node, heartbeat %v, watch %v)", hb, watch)
	return []benchreport.Figure{
		benchreport.NewFigure(name+": terminate -> leader's new run open, same term", "ms", benchreport.Millis(ours),
			"bare TerminateWorkflow + StartWorkflow (nothing to notice)", benchreport.Millis(bare),
			fmt.Sprintf("p95 <= heartbeat + 1 s = %.0f ms", targetMS), func(f benchreport.Figure) bool { return f.P95 <= targetMS }),
		benchreport.NewFigure(name+": terminate -> close noticed (status: replacing)", "ms", benchreport.Millis(seen),
			"terminate -> run closed (Temporal's close time)", benchreport.Millis(closed),
			fmt.Sprintf("p95 <= watch interval = %.0f ms", watchMS), func(f benchreport.Figure) bool { return f.P95 <= watchMS }),
		benchreport.Single(name+": Temporal calls per led queue per second at rest", "calls/s", perQueue,
			"a describe every watch interval (computed)", 1/watch.Seconds(),
			fmt.Sprintf("<= 2 per watch interval (a long poll, a describe) = %.2f", 2/watch.Seconds()), perQueue <= 2/watch.Seconds()),
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

package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/temporalx"
	"github.com/baton-run/baton/takeover"
)

// benchTakeover measures takeovers of a stale dispatcher: node-a owns o.takeovers queues and resigns
// each, leaving its run behind; node-b wins and takes over (describe, confirm, terminate the stale run
// by run ID, confirm, start). The figure runs from node-b's term start to its new run being open. The
// baseline is a bare StartWorkflow of a fresh workflow ID on the same server.
func benchTakeover(ctx context.Context, cluster *etcdtest.Cluster, o options) (benchreport.Figure, error) {
	srv, err := temporalx.StartServer(temporalx.Options{})
	if err != nil {
		return benchreport.Figure{}, err
	}
	defer srv.Close()
	tc, err := srv.NewClient()
	if err != nil {
		return benchreport.Figure{}, err
	}
	defer tc.Close()

	type node struct {
		el  *election.Elector
		mgr *takeover.Manager
	}
	mk := func() (*node, func(), error) {
		cli, err := cluster.NewClient()
		if err != nil {
			return nil, nil, err
		}
		el, err := election.New(cli, election.Config{})
		if err != nil {
			return nil, nil, err
		}
		mgr, err := takeover.New(tc, takeover.Config{StepDown: takeover.LeaveRunning})
		if err != nil {
			return nil, nil, err
		}
		return &node{el, mgr}, func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = el.Close(cctx)
			cli.Close()
		}, nil
	}
	a, closeA, err := mk()
	if err != nil {
		return benchreport.Figure{}, err
	}
	defer closeA()
	b, closeB, err := mk()
	if err != nil {
		return benchreport.Figure{}, err
	}
	defer closeB()

	queue := func(i int) string { return fmt.Sprintf("tq-%03d", i) }
	terms := make([]*election.Term, o.takeovers)
	for i := range o.takeovers {
		term, err := a.el.Campaign(ctx, "bench", queue(i), "node-a")
		if err != nil {
			return benchreport.Figure{}, err
		}
		if _, err := a.mgr.Take(ctx, term); err != nil {
			return benchreport.Figure{}, err
		}
		terms[i] = term
	}
	// Temporal refuses a same-ID start within about 1 s of the previous one; a stale dispatcher
	// left by a crash is older than that.
	time.Sleep(1100 * time.Millisecond)

	var ours []time.Duration
	for i := range o.takeovers {
		if err := terms[i].Resign(ctx); err != nil {
			return benchreport.Figure{}, err
		}
		term, err := b.el.Campaign(ctx, "bench", queue(i), "node-b")
		if err != nil {
			return benchreport.Figure{}, err
		}
		run, err := b.mgr.Take(ctx, term)
		if err != nil {
			return benchreport.Figure{}, err
		}
		if run.Path != takeover.PathTerminateFirst {
			return benchreport.Figure{}, fmt.Errorf("%s: takeover took path %s, want terminate_first", queue(i), run.Path)
		}
		ours = append(ours, run.Latency)
	}

	var bare []time.Duration
	for i := range o.takeovers {
		start := time.Now()
		if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("bare-%03d", i), TaskQueue: "bare"},
			takeover.DefaultWorkflowType); err != nil {
			return benchreport.Figure{}, err
		}
		bare = append(bare, time.Since(start))
	}
	return benchreport.NewFigure("takeover of a stale dispatcher (term start -> new run open)", "ms",
		benchreport.Millis(ours), "bare StartWorkflow (fresh ID)", benchreport.Millis(bare),
		"p95 <= 100 ms (PRD: < 30 s)", func(f benchreport.Figure) bool { return f.P95 <= 100 }), nil
}

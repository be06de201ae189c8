package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/takeover"
)

// stopTargetFactor is the whole-worker stop's target against its same-run floor: p95 <= this x the
// floor's p95, at every k (issue #40, item 6).
const stopTargetFactor = 1.5

// stopScaleFactor is the target of the stop's growth with k: p95 at k = 100 <= this x p95 at k = 1.
const stopScaleFactor = 2.0

// stopPollers are the goroutines that read the queues' current runs from Temporal while a stop is
// measured, the same for Baton and for its floor. They read the successor's start time that
// Temporal recorded, so their pace bounds the section's length, not its figures.
const stopPollers = 8

// benchStopE2E measures a whole worker's graceful stop for each k of -stop-ks: a demo-worker
// process leads k queues alone, a second one (the successor) starts and stands, then the first gets
// SIGTERM. Each queue's figure runs from the SIGTERM to the start time Temporal recorded for the
// successor's run (the workflow's current run is a new one, Running); the whole stop to the last
// of them. Beside it, the floor: a bare client on the same servers does, for k queues and with
// Baton's bound on concurrent hand-overs, only what a hand-over cannot skip (terminate the run by
// its ID, delete the election key), and a second client (its own etcd and Temporal connections, in
// this process) that watches the keys starts each next run with the FAIL conflict policy.
func benchStopE2E(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	bin, err := workerproc.Build()
	if err != nil {
		return nil, err
	}
	p95 := map[int][2]float64{}
	var figs []benchreport.Figure
	for _, k := range o.stopKs {
		began := time.Now()
		baton, batonAll, err := stopBaton(ctx, s, bin, k, o.stopLogs)
		if err != nil {
			return nil, fmt.Errorf("k=%d: %w", k, err)
		}
		floor, floorAll, err := stopFloor(ctx, s, k, o.stopBound, false)
		if err != nil {
			return nil, fmt.Errorf("k=%d: floor: %w", k, err)
		}
		qfloor, _, err := stopFloor(ctx, s, k, o.stopBound, true)
		if err != nil {
			return nil, fmt.Errorf("k=%d: floor with a quiesce: %w", k, err)
		}
		fmt.Printf("batonbench: whole-worker stop, k=%d: measured in %v\n", k, time.Since(began).Round(time.Second))
		base := fmt.Sprintf("bare terminate + key delete (%d at once) -> a watcher's FAIL start", o.stopBound)
		f := benchreport.NewFigure(fmt.Sprintf("whole-worker graceful stop, k=%d queues led: SIGTERM -> each successor's run Running (per queue)", k),
			"ms", baton, base, floor, fmt.Sprintf("p95 <= %.1fx baseline p95", stopTargetFactor),
			func(f benchreport.Figure) bool { return f.P95 <= stopTargetFactor*f.BaselineP95 })
		p95[k] = [2]float64{f.P95, f.BaselineP95}
		figs = append(figs, f,
			benchreport.Single(fmt.Sprintf("whole-worker graceful stop, k=%d queues led: SIGTERM -> every successor's run Running (whole stop)", k),
				"ms", benchreport.Ms(batonAll), base, benchreport.Ms(floorAll), "informational", true),
			benchreport.NewFigure(fmt.Sprintf("whole-worker graceful stop, k=%d queues led: against a floor that quiesces each run first (per queue)", k),
				"ms", baton, fmt.Sprintf("bare update to a live run (a worker's workflow task) + terminate + key delete (%d at once) -> a watcher's FAIL start", o.stopBound),
				qfloor, "informational", func(benchreport.Figure) bool { return true }))
	}
	one, okOne := p95[1]
	hundred, okHundred := p95[100]
	if okOne && okHundred && one[0] > 0 && one[1] > 0 {
		ratio := hundred[0] / one[0]
		figs = append(figs, benchreport.Single("whole-worker graceful stop: p95 at k=100 / p95 at k=1", "x", ratio,
			"the bare floor's p95 at k=100 / at k=1", hundred[1]/one[1], fmt.Sprintf("<= %.0fx", stopScaleFactor), ratio <= stopScaleFactor))
	}
	return figs, nil
}

// stopBaton runs one whole-worker stop of k queues with demo-worker processes and returns each
// queue's time from the SIGTERM to its successor's run, and the whole stop's.
func stopBaton(ctx context.Context, s *servers, bin string, k int, logDir string) ([]float64, time.Duration, error) {
	logs := func(id string) string { // in memory unless -stop-logs names a directory
		if logDir == "" {
			return ""
		}
		return filepath.Join(logDir, id+".log")
	}
	project := fmt.Sprintf("stop-k%d", k)
	queues := stopQueues(k)
	env := []string{
		"BATON_ETCD_ENDPOINTS=" + s.cluster.Endpoints()[0],
		"BATON_TEMPORAL_ADDRESS=" + s.temporal.HostPort(), "BATON_TEMPORAL_NAMESPACE=" + s.temporal.Namespace(),
		"BATON_REDIS_ADDR=" + s.rdb.Options().Addr,
		"BATON_PROJECT=" + project, "BATON_QUEUES=" + strings.Join(queues, ","),
		// One Temporal worker per process for all k dispatchers (the demo's default is one per
		// queue: a thousand SDK workers in one process on 2 cores measure the SDK, not the stop).
		"BATON_DISPATCHER_TASK_QUEUE=" + project,
		// The stopped worker keeps all k queues when the successor joins: no shedding to balance.
		"BATON_BALANCE_SHED_ABOVE=1000000",
	}
	if logDir != "" {
		env = append(env, "BATON_LOG_LEVEL=debug") // the quiesce's and the step-down's timings
	}
	var procs []*workerproc.Proc
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	start := func(id string) (*workerproc.Proc, error) {
		p, err := workerproc.Start(workerproc.Options{LogFile: logs(id)}, bin, id, env)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
		return p, p.WaitReady(ctx, 5*time.Minute)
	}
	a, err := start(project + "-a")
	if err != nil {
		return nil, 0, err
	}
	if _, err := leadsAll(ctx, a, queues, 5*time.Minute); err != nil {
		return nil, 0, err
	}
	if _, err := start(project + "-b"); err != nil {
		return nil, 0, err
	}
	sleepCtx(ctx, time.Second) // the successor's member record and view reach the leader
	runs, err := leadsAll(ctx, a, queues, 10*time.Second)
	if err != nil {
		return nil, 0, fmt.Errorf("the first worker no longer leads every queue once the successor stands: %w", err)
	}
	ids := make([]string, k)
	for i, q := range queues {
		if ids[i], err = takeover.WorkflowID(project, q); err != nil {
			return nil, 0, err
		}
	}
	fmt.Printf("batonbench: whole-worker stop, k=%d: SIGTERM to %s\n", k, a.ID)
	sent := time.Now()
	a.Signal(syscall.SIGTERM)
	per, err := successorsRunning(ctx, s.tc, ids, runs, sent, 3*time.Minute)
	if err != nil {
		return nil, 0, err
	}
	select {
	case <-a.Done():
	case <-time.After(time.Minute):
		return nil, 0, fmt.Errorf("%s did not exit a minute after SIGTERM", a.ID)
	}
	fmt.Printf("batonbench: whole-worker stop, k=%d: %s exited %v after SIGTERM\n", k, a.ID, time.Since(sent).Round(time.Millisecond))
	return benchreport.Millis(per), slices.Max(per), nil
}

// stopQueues are k queue names.
func stopQueues(k int) []string {
	qs := make([]string, k)
	for i := range qs {
		qs[i] = fmt.Sprintf("q%04d", i)
	}
	return qs
}

// leadsAll waits until p leads every queue with an open dispatcher run, and returns the runs.
func leadsAll(ctx context.Context, p *workerproc.Proc, queues []string, timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	for {
		led := 0
		runs := make([]string, len(queues))
		if st, ok := workerproc.Status(p.Addr); ok {
			byQueue := map[string]string{}
			for _, q := range st.Queues {
				if q.Leading && q.DispatcherOpen && q.RunID != "" {
					byQueue[q.Queue] = q.RunID
				}
			}
			for i, q := range queues {
				if runs[i] = byQueue[q]; runs[i] != "" {
					led++
				}
			}
			if led == len(queues) {
				return runs, nil
			}
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return nil, fmt.Errorf("%s leads %d of %d queues with an open run after %v", p.ID, led, len(queues), timeout)
		}
	}
}

// successorsRunning waits until each workflow ids[i] has a current run other than old[i], Running,
// and returns, for each, the time from sent to that run's start as Temporal recorded it.
func successorsRunning(ctx context.Context, tc client.Client, ids, old []string, sent time.Time, timeout time.Duration) ([]time.Duration, error) {
	per := make([]time.Duration, len(ids))
	pending := make(chan int, len(ids))
	for i := range ids {
		pending <- i
	}
	var mu sync.Mutex
	left := len(ids)
	deadline := time.Now().Add(timeout)
	var wg sync.WaitGroup
	for range stopPollers {
		wg.Go(func() {
			for time.Now().Before(deadline) && ctx.Err() == nil {
				mu.Lock()
				done := left == 0
				mu.Unlock()
				if done {
					return
				}
				var i int
				select {
				case i = <-pending:
				default: // the queues left are being read by other pollers
					sleepCtx(ctx, time.Millisecond)
					continue
				}
				d, err := tc.DescribeWorkflowExecution(ctx, ids[i], "")
				info := d.GetWorkflowExecutionInfo()
				if err == nil && info.GetExecution().GetRunId() != old[i] && info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
					per[i] = info.GetStartTime().AsTime().Sub(sent)
					mu.Lock()
					left--
					mu.Unlock()
					continue
				}
				pending <- i
				sleepCtx(ctx, time.Millisecond)
			}
		})
	}
	wg.Wait()
	if left > 0 {
		return nil, fmt.Errorf("%d of %d queues without a successor's run Running %v after the stop", left, len(ids), timeout)
	}
	return per, nil
}

// stopFloor measures the floor of a whole stop of k queues: a stopping client terminates each run by
// its ID and deletes its election key, bound at once; a successor client, with its own etcd and
// Temporal connections, watches the keys and starts each queue's next run with the FAIL conflict
// policy as soon as its key is gone. Nothing else: no quiesce, no run log, no heartbeat, no
// campaign, no verifying read, no describe before the start.
//
// With quiesce, the runs are live workflows on a bare SDK worker in this process, and the stopping
// client first sends each run an update and waits for its completion (a workflow task on that
// worker), as a hand-over that must not leave a request's handler to run twice cannot skip: the
// floor of Baton's stop with its quiesce round, which the first floor leaves out.
func stopFloor(ctx context.Context, s *servers, k, bound int, quiesce bool) ([]float64, time.Duration, error) {
	stopper, err := s.etcdClient()
	if err != nil {
		return nil, 0, err
	}
	watcher, err := s.etcdClient()
	if err != nil {
		return nil, 0, err
	}
	tcStop, err := s.temporal.NewClient()
	if err != nil {
		return nil, 0, err
	}
	defer tcStop.Close()
	tcNext, err := s.temporal.NewClient()
	if err != nil {
		return nil, 0, err
	}
	defer tcNext.Close()
	kind := "stop-floor"
	if quiesce {
		kind = "stop-floor-quiesce"
		w := worker.New(tcStop, kind, worker.Options{})
		w.RegisterWorkflowWithOptions(stopFloorWorkflow, workflow.RegisterOptions{Name: kind})
		if err := w.Start(); err != nil {
			return nil, 0, err
		}
		defer w.Stop()
	}
	prefix := fmt.Sprintf("/bench/%s/k%d/", kind, k)
	queues := stopQueues(k)
	lease, err := stopper.Grant(ctx, 60)
	if err != nil {
		return nil, 0, err
	}
	defer func() { _, _ = stopper.Revoke(context.WithoutCancel(ctx), lease.ID) }()
	ids, runs, index, rev, err := floorRuns(ctx, stopper, tcStop, lease.ID, kind, prefix, queues, quiesce)
	if err != nil {
		return nil, 0, err
	}
	wctx, wcancel := context.WithCancel(ctx)
	started := make(chan error, k)
	var wwg sync.WaitGroup
	defer func() { wcancel(); wwg.Wait() }()
	watch := watcher.Watch(clientv3.WithRequireLeader(wctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	wwg.Go(func() {
		for resp := range watch {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				i := index[strings.TrimPrefix(string(ev.Kv.Key), prefix)]
				wwg.Go(func() { _, err := floorStart(wctx, tcNext, kind, ids[i]); started <- err })
			}
		}
	})
	sent := time.Now()
	if err := floorStop(ctx, tcStop, stopper, prefix, queues, ids, runs, bound, quiesce); err != nil {
		return nil, 0, err
	}
	per, err := successorsRunning(ctx, s.tc, ids, runs, sent, 3*time.Minute)
	if err != nil {
		return nil, 0, err
	}
	for range k {
		if err := <-started; err != nil {
			return nil, 0, err
		}
	}
	return benchreport.Millis(per), slices.Max(per), nil
}

// floorStart starts the floor's run of workflow type and task queue kind under id, with the FAIL
// conflict policy, and returns its run ID.
func floorStart(ctx context.Context, tc client.Client, kind, id string) (string, error) {
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: kind,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE}, kind)
	if err != nil {
		return "", err
	}
	return run.GetRunID(), nil
}

// floorRuns sets the floor's k queues up before its stop: each queue's run started (and, with
// quiesce, live: its first workflow task has run on the worker, as a leader's has) and its election
// key put on lease. It returns the runs' IDs and run IDs, each queue's index, and the revision of
// the last put.
func floorRuns(ctx context.Context, cli *clientv3.Client, tc client.Client, lease clientv3.LeaseID, kind, prefix string,
	queues []string, quiesce bool) (ids, runs []string, index map[string]int, rev int64, err error) {
	k := len(queues)
	ids, runs, index = make([]string, k), make([]string, k), make(map[string]int, k)
	for i, q := range queues {
		ids[i], index[q] = fmt.Sprintf("%s-k%d-%s", kind, k, q), i
		if runs[i], err = floorStart(ctx, tc, kind, ids[i]); err != nil {
			return nil, nil, nil, 0, err
		}
		if quiesce {
			if err := floorQuiesce(ctx, tc, ids[i], runs[i]); err != nil {
				return nil, nil, nil, 0, err
			}
		}
		put, err := cli.Put(ctx, prefix+q, "stopper", clientv3.WithLease(lease))
		if err != nil {
			return nil, nil, nil, 0, err
		}
		rev = put.Header.Revision
	}
	return ids, runs, index, rev, nil
}

// floorStop is the floor's stopping client: for each queue, bound at once, it quiesces the run (with
// quiesce), terminates it by its ID and then deletes the queue's election key.
func floorStop(ctx context.Context, tc client.Client, cli *clientv3.Client, prefix string, queues, ids, runs []string, bound int, quiesce bool) error {
	slots := make(chan struct{}, bound)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	for i, q := range queues {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			var err error
			if quiesce {
				err = floorQuiesce(ctx, tc, ids[i], runs[i])
			}
			if err == nil {
				err = tc.TerminateWorkflow(ctx, ids[i], runs[i], "stop floor")
			}
			if err == nil {
				_, err = cli.Delete(ctx, prefix+q)
			}
			if err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", q, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopFloorQuiesce is the update the quiesce floor sends each run before it ends it.
const stopFloorQuiesce = "quiesce"

// stopFloorWorkflow is the quiesce floor's run: it accepts stopFloorQuiesce at once, and lives until
// it is terminated.
func stopFloorWorkflow(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandler(ctx, stopFloorQuiesce, func(workflow.Context) error { return nil }); err != nil {
		return err
	}
	return workflow.Await(ctx, func() bool { return false })
}

// floorQuiesce sends run the quiesce floor's update and waits for its completion.
func floorQuiesce(ctx context.Context, tc client.Client, id, run string) error {
	h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, RunID: run,
		UpdateName: stopFloorQuiesce, WaitForStage: client.WorkflowUpdateStageCompleted})
	if err != nil {
		return err
	}
	return h.Get(ctx, nil)
}

package main

import (
	"context"
	"fmt"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/takeover"
)

// handoverRounds is how many leaders the end-to-end handover section stops with SIGTERM.
const handoverRounds = 20

// handoverTarget is the end-to-end graceful handover's p95 target.
const handoverTarget = 50 * time.Millisecond

// benchHandoverE2E measures a graceful handover the way an operator sees it: three demo-worker
// processes serve one queue; the leader's process gets SIGTERM, and the figure runs until Temporal
// shows the successor's run Running (the workflow's current run is a new one, open), read from
// outside every 2 ms. The stopped worker is replaced by a new process before the next round. Beside
// it, from the same rounds, the successor's own takeover as it reports it (term won -> run open).
func benchHandoverE2E(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	bin, err := workerproc.Build()
	if err != nil {
		return nil, err
	}
	const project, queue = "handover-e2e", "h1"
	env := []string{
		"BATON_ETCD_ENDPOINTS=" + s.cluster.Endpoints()[0],
		"BATON_TEMPORAL_ADDRESS=" + s.temporal.HostPort(), "BATON_TEMPORAL_NAMESPACE=" + s.temporal.Namespace(),
		"BATON_REDIS_ADDR=" + s.rdb.Options().Addr,
		"BATON_PROJECT=" + project, "BATON_QUEUES=" + queue, "BATON_ELECTION_TTL=3s",
		"BATON_HEARTBEAT_INTERVAL=1s", "BATON_REGISTRY_HEARTBEAT_INTERVAL=1s",
	}
	var procs []*workerproc.Proc
	defer func() {
		for _, p := range procs {
			p.Kill()
		}
	}()
	start := func(id string) error {
		p, err := workerproc.Start(workerproc.Options{}, bin, id, env)
		if err != nil {
			return err
		}
		procs = append(procs, p)
		return p.WaitReady(ctx, time.Minute)
	}
	for i := range 3 {
		if err := start(fmt.Sprintf("w%d", i)); err != nil {
			return nil, err
		}
	}
	id, err := takeover.WorkflowID(project, queue)
	if err != nil {
		return nil, err
	}
	leader := func() (*workerproc.Proc, string, bool) {
		for _, p := range procs {
			if p.Exited() {
				continue
			}
			if st, ok := workerproc.Status(p.Addr); ok {
				if qs, ok := workerproc.Leading(st, queue); ok && qs.DispatcherOpen {
					return p, qs.RunID, true
				}
			}
		}
		return nil, "", false
	}
	fmt.Printf("batonbench: handover end to end: %d SIGTERMs of the leading demo-worker of 3\n", handoverRounds)
	var e2e, takeovers []float64
	for round := range handoverRounds {
		var old *workerproc.Proc
		var oldRun string
		for deadline := time.Now().Add(time.Minute); ; sleepCtx(ctx, 20*time.Millisecond) {
			var ok bool
			if old, oldRun, ok = leader(); ok {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("round %d: no leader with an open run", round+1)
			}
		}
		sent := time.Now()
		old.Signal(syscall.SIGTERM)
		for deadline := time.Now().Add(30 * time.Second); ; sleepCtx(ctx, 2*time.Millisecond) {
			d, err := s.tc.DescribeWorkflowExecution(ctx, id, "")
			if err == nil {
				info := d.GetWorkflowExecutionInfo()
				if info.GetExecution().GetRunId() != oldRun && info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
					e2e = append(e2e, benchreport.Ms(time.Since(sent)))
					break
				}
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("round %d: no successor's run 30 s after SIGTERM of %s", round+1, old.ID)
			}
		}
		select {
		case <-old.Done():
		case <-time.After(30 * time.Second):
			return nil, fmt.Errorf("round %d: %s did not exit after SIGTERM", round+1, old.ID)
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); sleepCtx(ctx, 20*time.Millisecond) {
			if p, _, ok := leader(); ok {
				if st, ok := workerproc.Status(p.Addr); ok {
					if qs, ok := workerproc.Leading(st, queue); ok {
						takeovers = append(takeovers, benchreport.Ms(qs.TakeoverLatency))
					}
				}
				break
			}
		}
		if err := start(fmt.Sprintf("w%d", round+3)); err != nil {
			return nil, err
		}
	}
	return []benchreport.Figure{
		benchreport.NewFigure("graceful handover end to end: SIGTERM to the leading demo-worker -> the successor's run Running in Temporal (3 processes, quiesce included)",
			"ms", e2e, "the successor's own takeover (term -> run open, its /status)", takeovers,
			fmt.Sprintf("p95 <= %v", handoverTarget), func(f benchreport.Figure) bool { return f.P95 <= benchreport.Ms(handoverTarget) }),
	}, nil
}

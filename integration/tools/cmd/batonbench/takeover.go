package main

import (
	"context"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/takeover"
)

// takeoverTarget is the PRD's takeover figure: a new owner's run is open this soon after its term starts.
const takeoverTarget = 100 // ms, p95

// benchTakeover measures takeovers on the FAIL path (describe, terminate a prior owner's open run by
// its run ID, confirm the term, start with WorkflowIDConflictPolicy FAIL, confirm the term again) from
// the term's start to the new run being open, on both of its paths:
//
//   - no prior run: node-a wins each of o.takeovers fresh queues and starts the first run;
//   - terminate-first: node-a resigns each queue leaving its run open (LeaveRunning), node-b wins and
//     terminates node-a's run before starting its own.
//
// Every takeover is checked in Temporal after it is timed: the workflow's current run is the one the
// takeover returned, running, with the term's token and server ID in its memo, and on the
// terminate-first path node-a's run is terminated. The baseline is a bare StartWorkflow of a fresh
// workflow ID on the same server, measured between the two.
func benchTakeover(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	tc := s.tc
	nodes, err := s.nodes("node-a", "node-b")
	if err != nil {
		return nil, err
	}
	a, b := nodes[0], nodes[1]

	// take wins queue i for n and takes the dispatcher over on the path it must take; the run is
	// checked in Temporal after the latency is taken.
	take := func(n *node, i int, want takeover.Path) (*election.Term, takeover.Run, error) {
		q := fmt.Sprintf("tq-%03d", i)
		term, run, err := n.take(ctx, q)
		if err != nil {
			return nil, takeover.Run{}, err
		}
		if run.Path != want {
			return nil, takeover.Run{}, fmt.Errorf("%s: %s's takeover took path %s, want %s", q, n.id, run.Path, want)
		}
		if err := checkOwned(ctx, tc, run.WorkflowID, run.RunID, term.Token(), n.id); err != nil {
			return nil, takeover.Run{}, fmt.Errorf("%s: %w", q, err)
		}
		return term, run, nil
	}

	fmt.Printf("batonbench: takeover: %d takeovers on each FAIL path\n", o.takeovers)
	var fresh []time.Duration
	retried := 0 // takeovers that needed more than one start attempt
	terms := make([]*election.Term, o.takeovers)
	prior := make([]takeover.Run, o.takeovers)
	for i := range o.takeovers {
		if terms[i], prior[i], err = take(a, i, takeover.PathStart); err != nil {
			return nil, err
		}
		fresh = append(fresh, prior[i].Latency)
		if prior[i].Attempts > 1 {
			retried++
		}
	}

	// The baseline, while node-a's runs age: Temporal refuses a same-ID start within about 1 s of the
	// previous one, and a prior owner's run is older than that.
	aged := time.Now().Add(1100 * time.Millisecond)
	var bare []time.Duration
	for i := range o.takeovers {
		start := time.Now()
		if _, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("bare-%03d", i), TaskQueue: "bare"},
			takeover.DefaultWorkflowType); err != nil {
			return nil, err
		}
		bare = append(bare, time.Since(start))
	}
	time.Sleep(time.Until(aged))

	var termFirst []time.Duration
	for i := range o.takeovers {
		if err := terms[i].Resign(ctx); err != nil {
			return nil, err
		}
		_, run, err := take(b, i, takeover.PathTerminateFirst)
		if err != nil {
			return nil, err
		}
		termFirst = append(termFirst, run.Latency)
		if run.Attempts > 1 {
			retried++
		}
		if _, err := terminated(ctx, tc, run.WorkflowID, prior[i].RunID); err != nil {
			return nil, fmt.Errorf("node-a's run after node-b's takeover: %w", err)
		}
	}
	if retried > 0 {
		fmt.Printf("batonbench: takeover: %d of %d takeovers needed more than one start attempt\n", retried, 2*o.takeovers)
	}
	target := fmt.Sprintf("p95 <= %d ms (PRD: < 30 s)", takeoverTarget)
	met := func(f benchreport.Figure) bool { return f.P95 <= takeoverTarget }
	const baseline = "bare StartWorkflow (fresh ID)"
	return []benchreport.Figure{
		benchreport.NewFigure("takeover, FAIL path, no prior run (term start -> run open)", "ms",
			benchreport.Millis(fresh), baseline, benchreport.Millis(bare), target, met),
		benchreport.NewFigure("takeover, FAIL path, terminate-first: prior owner's run open (term start -> new run open)", "ms",
			benchreport.Millis(termFirst), baseline, benchreport.Millis(bare), target, met),
	}, nil
}

// checkOwned checks in Temporal that runID is the workflow's current run, running, and carries the
// owner token and server ID in its memo: the run the leader believes it owns is the one that runs.
func checkOwned(ctx context.Context, tc client.Client, workflowID, runID string, token int64, serverID string) error {
	resp, err := tc.DescribeWorkflowExecution(ctx, workflowID, "")
	if err != nil {
		return err
	}
	info := resp.GetWorkflowExecutionInfo()
	owner, _, err := takeover.DecodeOwner(nil, info.GetMemo())
	if err != nil {
		return fmt.Errorf("%s: %w", workflowID, err)
	}
	if info.GetExecution().GetRunId() != runID || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING ||
		owner.Token != token || owner.ServerID != serverID {
		return fmt.Errorf("%s: current run %s is %v, owned by %q at token %d; the leader %q at token %d says run %s",
			workflowID, info.GetExecution().GetRunId(), info.GetStatus(), owner.ServerID, owner.Token, serverID, token, runID)
	}
	return nil
}

// terminated checks that a run is terminated, and returns when it closed.
func terminated(ctx context.Context, tc client.Client, workflowID, runID string) (time.Time, error) {
	resp, err := tc.DescribeWorkflowExecution(ctx, workflowID, runID)
	if err != nil {
		return time.Time{}, err
	}
	info := resp.GetWorkflowExecutionInfo()
	if info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		return time.Time{}, fmt.Errorf("%s: run %s is %v, want terminated", workflowID, runID, info.GetStatus())
	}
	return info.GetCloseTime().AsTime(), nil
}

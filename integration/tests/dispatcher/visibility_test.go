package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap/zaptest"
	"google.golang.org/protobuf/proto"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/takeover"
)

// laggingVisibility is the workers' Temporal client with a visibility store that has not indexed one
// run's close (stale: listed as RUNNING) or that run at all (missing), for as long as the test runs:
// Temporal's visibility is eventually consistent, and a failed visibility task (an Elasticsearch
// 429) is retried while later runs' rows go through. The lie is made on the client side, in the
// ListWorkflow answers; everything else, describe and histories included, is the real server's.
type laggingVisibility struct {
	client.Client
	runID   atomic.Pointer[string]
	missing bool
	lied    atomic.Int64 // listing answers that hid the run's close
}

func (l *laggingVisibility) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	resp, err := l.Client.ListWorkflow(ctx, req)
	id := l.runID.Load()
	if err != nil || id == nil {
		return resp, err
	}
	out := proto.Clone(resp).(*workflowservice.ListWorkflowExecutionsResponse)
	out.Executions = nil
	for _, info := range resp.GetExecutions() {
		if info.GetExecution().GetRunId() != *id {
			out.Executions = append(out.Executions, info)
			continue
		}
		l.lied.Add(1)
		if l.missing {
			continue
		}
		stale := proto.Clone(info).(*workflowpb.WorkflowExecutionInfo)
		stale.Status, stale.CloseTime, stale.ExecutionDuration = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil, nil
		out.Executions = append(out.Executions, stale)
	}
	return out, nil
}

// Nothing a run accepted is lost while visibility lags behind its close. The audit's scenario:
// node-a's start is held in flight while its term ends; node-b takes over and steps down; node-c's
// takeover describes the workflow (node-b's run is the latest) and its start is held; node-a's late
// start lands as run X while no run is open, X accepts three requests, and node-a ends it (its
// terminate held until then); node-c's start lands naming node-b's run as its prior, so X sits
// between the two, and visibility lists X as RUNNING, or not at all, for the whole test. Every
// request X accepted is handled, once. (Before, the carry-over skipped every row listed as RUNNING
// and knew only the runs visibility listed: 3 of 3 requests were never handled.)
func TestLaggingVisibilityLosesNothing(t *testing.T) {
	for _, missing := range []bool{false, true} {
		name := "close not indexed"
		if missing {
			name = "run not listed"
		}
		t.Run(name, func(t *testing.T) {
			e := newEnv(t)
			lag := &laggingVisibility{Client: e.tc, missing: missing}
			e.historyReader = lag

			startA := newHeldStart()
			endA := newHeldCall(workflowservice.WorkflowService_TerminateWorkflowExecution_FullMethodName)
			mgrA := e.managerWith(t, heldClient(t, startA, endA),
				takeover.Config{Logger: zaptest.NewLogger(t).Named("node-a"), AttemptTimeout: time.Minute})
			_, termA := e.ownerOf(t, "node-a")
			tookA := make(chan error, 1)
			go func() {
				_, err := mgrA.Take(t.Context(), termA)
				tookA <- err
			}()
			startA.waitHeld(t, "node-a")
			if err := termA.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}

			runB, termB := e.take(t, "node-b")
			if err := e.manager(t, "node-b").StepDown(t.Context(), termB, runB); err != nil {
				t.Fatal(err)
			}
			if err := termB.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}

			// node-c describes (node-b's run is the latest) and its start is held.
			startC := newHeldStart()
			mgrC := e.managerWith(t, heldClient(t, startC),
				takeover.Config{Logger: zaptest.NewLogger(t).Named("node-c"), AttemptTimeout: time.Minute})
			_, termC := e.ownerOf(t, "node-c")
			type took struct {
				run takeover.Run
				err error
			}
			tookC := make(chan took, 1)
			go func() {
				run, err := mgrC.Take(t.Context(), termC)
				tookC <- took{run, err}
			}()
			startC.waitHeld(t, "node-c")

			// node-a's late start lands as X; node-a's post-start check ends it, held until X has
			// accepted three requests.
			close(startA.release)
			endA.waitHeld(t, "node-a")
			desc, err := e.tc.DescribeWorkflowExecution(t.Context(), runB.WorkflowID, "")
			if err != nil {
				t.Fatal(err)
			}
			x := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			if x == runB.RunID || desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Fatalf("the latest run is %s (%v), want node-a's late run open", x, desc.GetWorkflowExecutionInfo().GetStatus())
			}
			lag.runID.Store(&x)
			var keys []string
			for i := range 3 {
				r := request(fmt.Sprintf("accepted-by-x-%d", i))
				keys = append(keys, r.Key())
				e.signal(t, r)
			}
			close(endA.release)
			if err := <-tookA; !errors.Is(err, takeover.ErrSuperseded) {
				t.Fatalf("node-a's takeover = %v, want ErrSuperseded after its late start", err)
			}

			close(startC.release)
			c := <-tookC
			if c.err != nil {
				t.Fatalf("node-c's takeover: %v", c.err)
			}
			t.Cleanup(func() {
				_ = e.tc.TerminateWorkflow(context.WithoutCancel(t.Context()), c.run.WorkflowID, c.run.RunID, "test over")
			})
			if c.run.Owner.PriorRunID != runB.RunID {
				t.Fatalf("node-c's prior run = %s, want node-b's %s (X started after node-c's describe)", c.run.Owner.PriorRunID, runB.RunID)
			}

			h := e.worker(t)
			e.waitDone(t, keys)
			onceEach(t, h, keys)
			st := e.state(t, e.runOf(t, c.run), func(s dispatcher.State) bool { return s.Dispatched == 3 })
			if st.CarriedOver != 3 {
				t.Errorf("state %+v: want X's 3 requests carried over", st)
			}
			if lag.lied.Load() == 0 {
				t.Error("the carry-over never listed the runs: the lagging visibility was not exercised")
			}

			// node-c's run finished its carry-over: node-d's scan stops at it and forgets the log's
			// older records (node-b's run and X), keeping node-c's and its own.
			if err := e.manager(t, "node-c").StepDown(t.Context(), termC, c.run); err != nil {
				t.Fatal(err)
			}
			if err := termC.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			runD, _ := e.take(t, "node-d")
			rl, err := takeover.NewEtcdRunLog(e.cli, "")
			if err != nil {
				t.Fatal(err)
			}
			want := []string{c.run.RunID, runD.RunID}
			slices.Sort(want)
			harness.Eventually(t, time.Minute, "the run log pruned to node-c's and node-d's runs", func() error {
				logged, err := rl.Runs(t.Context(), runD.Owner.RunLog)
				if err != nil {
					return err
				}
				var got []string
				for _, r := range logged {
					got = append(got, r.RunID)
				}
				slices.Sort(got)
				if !slices.Equal(got, want) {
					return fmt.Errorf("logged %v, want %v", got, want)
				}
				return nil
			})
		})
	}
}

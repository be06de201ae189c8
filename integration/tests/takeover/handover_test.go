package takeover_test

import (
	"context"
	"sync/atomic"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/takeover"
)

// describeCounter is a Temporal client that counts its describes.
type describeCounter struct {
	client.Client
	describes atomic.Int32
}

func (c *describeCounter) DescribeWorkflowExecution(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.describes.Add(1)
	return c.Client.DescribeWorkflowExecution(ctx, id, runID)
}

// A successor after a planned hand-over starts its run without describing the workflow: the run
// log (in etcd) names the predecessor's run, which its step-down ended, and the FAIL-policy start
// proves that no run is open. After a crash, the owner's run is still open: the start fails, and the
// same attempt describes the run and terminates it by its run ID. Real etcd and Temporal (issue #40:
// a describe per queue stood in each successor's way during a whole worker's stop).
func TestSuccessorOfAHandOverStartsWithoutDescribing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		stepDown  bool
		describes int32
		path      takeover.Path
	}{
		{name: "planned hand-over", stepDown: true, describes: 0, path: takeover.PathStart},
		{name: "crash", stepDown: false, describes: 1, path: takeover.PathTerminateFirst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			rl, err := takeover.NewEtcdRunLog(etcdx.Client(t, e.etcd), "")
			if err != nil {
				t.Fatal(err)
			}
			cfg := takeover.Config{RunLog: rl, QuiesceTimeout: -1} // no worker serves the runs: nothing to quiesce
			a := e.node(t, "node-a", election.Config{}, cfg)
			counter := &describeCounter{Client: e.tc}
			b := e.nodeOn(t, counter, "node-b", election.Config{}, cfg)

			termA := a.campaign(t, "orders")
			runA, err := a.mgr.Take(t.Context(), termA)
			if err != nil {
				t.Fatal(err)
			}
			if tc.stepDown {
				if err := a.mgr.StepDown(t.Context(), termA, runA); err != nil {
					t.Fatal(err)
				}
			}
			if err := termA.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
			termB := b.campaign(t, "orders")
			runB, err := b.mgr.Take(t.Context(), termB)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = e.tc.TerminateWorkflow(context.WithoutCancel(t.Context()), runB.WorkflowID, runB.RunID, "test over")
			})
			if n := counter.describes.Load(); n != tc.describes {
				t.Errorf("the successor's takeover described the workflow %d times, want %d", n, tc.describes)
			}
			if runB.Attempts != 1 || runB.Path != tc.path || runB.Owner.PriorRunID != runA.RunID {
				t.Errorf("successor's run: attempts %d, path %s, prior %q; want 1, %s, %q", runB.Attempts, runB.Path, runB.Owner.PriorRunID, tc.path, runA.RunID)
			}
			if st := e.describe(t, runA.WorkflowID, runA.RunID).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
				t.Errorf("predecessor's run %v, want TERMINATED", st)
			}
			if st := e.describe(t, runB.WorkflowID, runB.RunID).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Errorf("successor's run %v, want RUNNING", st)
			}
		})
	}
}

package takeover

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// startingClient is a Temporal client on which a workflow has no run yet: a takeover starts run
// "r1", a step-down's terminate and quiesce answer at once.
type startingClient struct {
	Client
	mu         sync.Mutex
	terminated []client.TerminateWorkflowOptions
}

func (*startingClient) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return nil, serviceerror.NewNotFound("no run")
}

func (*startingClient) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	return startedRun{id: "r1"}, nil
}

func (c *startingClient) TerminateWorkflowWithOptions(_ context.Context, o client.TerminateWorkflowOptions) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.terminated = append(c.terminated, o)
	return nil
}

func (*startingClient) UpdateWorkflow(context.Context, client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return doneUpdate{}, nil
}

// startedRun is the run a start returned.
type startedRun struct {
	client.WorkflowRun
	id string
}

func (r startedRun) GetRunID() string { return r.id }

// countingLog is a run log that keeps every record it was asked to write.
type countingLog struct {
	mu      sync.Mutex
	records []LoggedRun
}

func (*countingLog) Range(project, queue string) string {
	return "/runs/" + project + "/" + queue + "/"
}

func (l *countingLog) Record(_ context.Context, _ string, run LoggedRun) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, run)
	return nil
}

func (l *countingLog) written() []LoggedRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]LoggedRun(nil), l.records...)
}

// A step-down logs its chain before it ends the run only when the record the takeover wrote no
// longer names the chain's current run: a run that never continued as new is already logged as it
// is, and writing the same record again cost every queue of a whole worker's stop an etcd write on
// the way to its successor (issue #40). A chain that continued as new is logged again, so the
// carry-over starts from its latest run.
func TestStepDownLogsOnlyWhatTheTakeoverDidNot(t *testing.T) {
	for _, tc := range []struct {
		name      string
		continued bool
		want      []LoggedRun // after the takeover's own record
	}{
		{name: "never continued", want: nil},
		{name: "continued as new", continued: true, want: []LoggedRun{{RunID: "r1", Last: "r2", ServerID: "node-a", Token: 7}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, rl := &startingClient{}, &countingLog{}
			m, err := New(c, Config{RunLog: rl, QuiesceTimeout: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			term := heldTerm{token: 7}
			run, err := m.Take(t.Context(), term)
			if err != nil {
				t.Fatal(err)
			}
			if got := rl.written(); len(got) != 1 || got[0].RunID != "r1" || got[0].Last != "r1" {
				t.Fatalf("the takeover logged %+v, want its run r1 once", got)
			}
			if tc.continued {
				run.RunID = "r2" // as Watch follows the chain
			}
			if err := m.StepDown(t.Context(), term, run); err != nil {
				t.Fatal(err)
			}
			got := rl.written()[1:]
			if len(got) != len(tc.want) {
				t.Fatalf("the step-down logged %+v, want %+v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("the step-down logged %+v, want %+v", got, tc.want)
				}
			}
			if len(c.terminated) != 1 || c.terminated[0].FirstExecutionRunID != "r1" {
				t.Fatalf("the step-down terminated %+v, want the chain of r1 once", c.terminated)
			}
		})
	}
}

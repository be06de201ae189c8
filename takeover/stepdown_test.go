package takeover

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
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

// handedOverClient is a Temporal client for a successor's takeover: the workflow's current run is
// open (open: a crashed owner's) or not, a start fails with AlreadyStarted while it is open, and the
// calls are counted.
type handedOverClient struct {
	startingClient
	open      string // the open run's ID, "" when none
	describes int
	starts    int
}

func (c *handedOverClient) DescribeWorkflowExecution(_ context.Context, id, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.describes++
	if c.open == "" {
		return nil, serviceerror.NewNotFound("no run")
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{
		Execution: &commonpb.WorkflowExecution{WorkflowId: id, RunId: c.open},
		Status:    enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING,
	}}, nil
}

func (c *handedOverClient) ExecuteWorkflow(context.Context, client.StartWorkflowOptions, any, ...any) (client.WorkflowRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starts++
	if c.open != "" {
		return nil, serviceerror.NewWorkflowExecutionAlreadyStarted("running", "", c.open)
	}
	return startedRun{id: "r9"}, nil
}

func (c *handedOverClient) TerminateWorkflowWithOptions(_ context.Context, o client.TerminateWorkflowOptions) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.terminated = append(c.terminated, o)
	if o.RunID == c.open {
		c.open = ""
	}
	return nil
}

// latestLog is a run log whose latest record is given.
type latestLog struct {
	countingLog
	latest *LoggedRun
}

func (l *latestLog) Latest(context.Context, string) (LoggedRun, bool, error) {
	if l.latest == nil {
		return LoggedRun{}, false, nil
	}
	return *l.latest, true, nil
}

// A successor whose queue's run log names the chain logged last starts its run first, naming that
// chain's latest run as its prior run, and describes the workflow only when the start finds a run
// open: after a planned hand-over, whose predecessor ended its run, a whole worker's stop costs each
// successor no describe (issue #40). A crashed owner's run, still open, is found by the failed start,
// described and terminated by its run ID in the same attempt; a queue with nothing logged (its first
// takeover, or runs from before the log) is described first, as before.
func TestTakeoverAfterAHandOverStartsWithoutDescribing(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		latest               *LoggedRun
		open                 string
		describes, starts    int
		path                 Path
		prior, terminatedRun string
	}{
		{name: "predecessor ended its run", latest: &LoggedRun{RunID: "r1", Last: "r2", ServerID: "node-a", Token: 5},
			describes: 0, starts: 1, path: PathStart, prior: "r2"},
		{name: "crashed owner's run still open", latest: &LoggedRun{RunID: "r1", Last: "r2", ServerID: "node-a", Token: 5}, open: "r2",
			describes: 1, starts: 2, path: PathTerminateFirst, prior: "r2", terminatedRun: "r2"},
		{name: "nothing logged", open: "r0", describes: 1, starts: 1, path: PathTerminateFirst, prior: "r0", terminatedRun: "r0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &handedOverClient{open: tc.open}
			m, err := New(c, Config{RunLog: &latestLog{latest: tc.latest}})
			if err != nil {
				t.Fatal(err)
			}
			run, err := m.Take(t.Context(), heldTerm{token: 7})
			if err != nil {
				t.Fatal(err)
			}
			if c.describes != tc.describes || c.starts != tc.starts {
				t.Errorf("%d describes, %d starts; want %d, %d", c.describes, c.starts, tc.describes, tc.starts)
			}
			if run.RunID != "r9" || run.Path != tc.path || run.Attempts != 1 || run.Owner.PriorRunID != tc.prior {
				t.Errorf("run %s path %s attempts %d prior %q; want r9 %s 1 %q", run.RunID, run.Path, run.Attempts, run.Owner.PriorRunID, tc.path, tc.prior)
			}
			var ended []string
			for _, o := range c.terminated {
				ended = append(ended, o.RunID)
			}
			if want := []string{tc.terminatedRun}; tc.terminatedRun == "" && len(ended) != 0 || tc.terminatedRun != "" && !slices.Equal(ended, want) {
				t.Errorf("terminated %v, want %q", ended, tc.terminatedRun)
			}
		})
	}
}

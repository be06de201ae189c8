package progress

import (
	"context"
	"errors"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/dispatcher"
)

// fakeTemporal answers Check's calls from fields; the real server's answers are the integration
// tests' business.
type fakeTemporal struct {
	describeErr error
	status      enumspb.WorkflowExecutionStatus
	task        *workflowpb.PendingWorkflowTaskInfo
	activities  []*workflowpb.PendingActivityInfo
	pollers     []time.Time
	progress    *dispatcher.Progress
}

func (f fakeTemporal) DescribeWorkflowExecution(context.Context, string, string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	if f.describeErr != nil {
		return nil, f.describeErr
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{
		ExecutionConfig:       &workflowpb.WorkflowExecutionConfig{TaskQueue: &taskqueuepb.TaskQueue{Name: "tq"}},
		WorkflowExecutionInfo: &workflowpb.WorkflowExecutionInfo{Status: f.status},
		PendingWorkflowTask:   f.task, PendingActivities: f.activities,
	}, nil
}

func (f fakeTemporal) DescribeTaskQueue(context.Context, string, enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	var out workflowservice.DescribeTaskQueueResponse
	for _, t := range f.pollers {
		out.Pollers = append(out.Pollers, &taskqueuepb.PollerInfo{LastAccessTime: timestamppb.New(t)})
	}
	return &out, nil
}

func (f fakeTemporal) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	if f.progress == nil {
		return nil, errors.New("unknown queryType baton.progress")
	}
	p, err := converter.GetDefaultDataConverter().ToPayloads(*f.progress)
	if err != nil {
		return nil, err
	}
	return encoded{p}, nil
}

type encoded struct{ p *commonpb.Payloads }

func (e encoded) HasValue() bool { return true }
func (e encoded) Get(valuePtr any) error {
	return converter.GetDefaultDataConverter().FromPayloads(e.p, valuePtr)
}

func TestCheckNamesTheFirstCause(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	running := enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	polled := []time.Time{now.Add(-30 * time.Second)}
	waiting := &workflowpb.PendingWorkflowTaskInfo{State: enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED,
		ScheduledTime: timestamppb.New(now.Add(-15 * time.Second))}
	inFlight := []*workflowpb.PendingActivityInfo{{ActivityType: &commonpb.ActivityType{Name: dispatcher.ActivityDispatchBatch}, Attempt: 1}}
	for _, tc := range []struct {
		name string
		tc   fakeTemporal
		want Cause
	}{
		{"healthy and idle", fakeTemporal{status: running, pollers: polled, progress: &dispatcher.Progress{}}, ""},

		{"not Baton's dispatcher", fakeTemporal{status: running, pollers: polled}, ""},
		{"closed run", fakeTemporal{status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED}, ""},
		{"unreachable", fakeTemporal{describeErr: errors.New("connection refused")}, CauseUnreachable},
		{"idle, nobody polls", fakeTemporal{status: running}, ""},
		{"a task waits, nobody ever polled", fakeTemporal{status: running, task: waiting}, CauseNoPollers},
		{"a task waits, the pollers are gone", fakeTemporal{status: running, task: waiting, pollers: []time.Time{now.Add(-5 * time.Minute)}}, CauseNoPollers},
		{"a task waits briefly, polled", fakeTemporal{status: running, task: waiting, pollers: polled, progress: &dispatcher.Progress{}}, ""},
		{"a task held", fakeTemporal{status: running, pollers: polled, task: &workflowpb.PendingWorkflowTaskInfo{
			State: enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED, ScheduledTime: timestamppb.New(now.Add(-time.Minute))}}, CauseTaskStuck},
		{"a task retried, young", fakeTemporal{status: running, pollers: polled, task: &workflowpb.PendingWorkflowTaskInfo{
			State: enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED, Attempt: 3, ScheduledTime: timestamppb.New(now.Add(-time.Second))}}, CauseTaskStuck},
		{"a task young", fakeTemporal{status: running, pollers: polled, progress: &dispatcher.Progress{}, task: &workflowpb.PendingWorkflowTaskInfo{
			State: enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED, ScheduledTime: timestamppb.New(now.Add(-time.Second))}}, ""},
		{"dispatch failing", fakeTemporal{status: running, pollers: polled, activities: []*workflowpb.PendingActivityInfo{{
			ActivityType: &commonpb.ActivityType{Name: dispatcher.ActivityDispatchBatch}, Attempt: 4,
			LastFailure: &failurepb.Failure{Message: "ledger unavailable"}}}}, CauseDispatchFailing},
		{"another activity retrying", fakeTemporal{status: running, pollers: polled, progress: &dispatcher.Progress{}, activities: []*workflowpb.PendingActivityInfo{{
			ActivityType: &commonpb.ActivityType{Name: dispatcher.ActivityBacklog}, Attempt: 4}}}, ""},
		{"oldest pending", fakeTemporal{status: running, pollers: polled, activities: inFlight,
			progress: &dispatcher.Progress{InFlight: 2, OldestAccepted: now.Add(-2 * time.Minute)}}, CauseOldestPending},
		{"young pending", fakeTemporal{status: running, pollers: polled, activities: inFlight,
			progress: &dispatcher.Progress{InFlight: 2, OldestAccepted: now.Add(-2 * time.Second)}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(t.Context(), tc.tc, Config{}, "dispatcher-p-q", "run", now)
			if rep.Cause != tc.want {
				t.Fatalf("cause %q (%s), want %q", rep.Cause, rep.Detail, tc.want)
			}
			if rep.Stalled() != (tc.want != "") || (rep.Stalled() && rep.Detail == "") {
				t.Fatalf("report %+v: Stalled and Detail disagree with the cause", rep)
			}
		})
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for field, c := range map[string]Config{
		"Interval": {Interval: time.Hour}, "PollerWindow": {PollerWindow: time.Millisecond},
		"TaskStuckAfter": {TaskStuckAfter: -time.Second}, "PendingMax": {PendingMax: 48 * time.Hour},
		"CallTimeout": {CallTimeout: time.Hour}, "FailingAttempts": {FailingAttempts: 1},
		"WorkflowTaskTimeout": {WorkflowTaskTimeout: time.Hour},
	} {
		err := c.Validate()
		if !errors.Is(err, ErrInvalidConfig) || !containsField(err, field) {
			t.Errorf("%+v: %v, want an ErrInvalidConfig naming %s", c, err, field)
		}
	}
}

// TaskStuckAfter follows the runs' task timeout by default, and must be at least that when set.
func TestTaskStuckAfterFollowsTheTaskTimeout(t *testing.T) {
	for _, tc := range []struct{ timeout, want time.Duration }{
		{0, DefaultTaskStuckAfter}, {2 * time.Second, DefaultTaskStuckAfter}, {time.Minute, 2 * time.Minute},
	} {
		if got := (Config{WorkflowTaskTimeout: tc.timeout}).WithDefaults().TaskStuckAfter; got != tc.want {
			t.Errorf("WorkflowTaskTimeout %v: TaskStuckAfter %v, want %v", tc.timeout, got, tc.want)
		}
	}
	err := Config{WorkflowTaskTimeout: time.Minute, TaskStuckAfter: 30 * time.Second}.Validate()
	if !errors.Is(err, ErrInvalidConfig) || !containsField(err, "TaskStuckAfter") {
		t.Fatalf("TaskStuckAfter below the task timeout: %v, want an ErrInvalidConfig naming TaskStuckAfter", err)
	}
}

func containsField(err error, field string) bool {
	var bad *configerr.Error
	return errors.As(err, &bad) && bad.Field == field
}

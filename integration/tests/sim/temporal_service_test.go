package sim_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/integration/sim/temporalmodel"
)

// conformanceWorkflow is the real server's side of the model's out-of-band closes: it waits for a
// closeSignal naming how to close (complete, fail, can) or for a cancel.
const (
	conformanceWorkflow = "baton.SimConformance"
	closeSignal         = "sim.close"
)

func conformanceWorkflowFunc(ctx workflow.Context) error {
	action := ""
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, closeSignal), func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &action) })
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) { action = "cancel" })
	sel.Select(ctx)
	switch action {
	case "complete":
		return nil
	case "fail":
		return errors.New("failed by script")
	case "can":
		return workflow.NewContinueAsNewError(ctx, conformanceWorkflow)
	}
	return ctx.Err()
}

// service is what a conformance script drives: the model or the real server, through the same
// requests.
type service interface {
	start(ctx context.Context, req temporalmodel.StartRequest) (temporalmodel.StartResponse, error)
	terminate(ctx context.Context, req temporalmodel.TerminateRequest) error
	describe(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	// closeEvent is the close event type of a closed run and the run it continued as.
	closeEvent(ctx context.Context, id, runID string) (enumspb.EventType, string, error)
	// outOfBand closes the open run (the one named) as action says: terminate, cancel, complete,
	// fail, can (continue-as-new).
	outOfBand(ctx context.Context, id, runID, action string) error
	// list is the visibility listing of id's runs (ListWorkflow, WorkflowId = id), every page.
	list(ctx context.Context, id string, pageSize int32) ([]*workflowpb.WorkflowExecutionInfo, error)
	// started is a run's started event: the chain's first run and the run it continued from.
	started(ctx context.Context, id, runID string) (first, continuedFrom string, err error)
}

// listAll reads every page of a listing from r.
func listAll(ctx context.Context, id string, pageSize int32,
	r func(context.Context, *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error)) ([]*workflowpb.WorkflowExecutionInfo, error) {
	var out []*workflowpb.WorkflowExecutionInfo
	var token []byte
	for {
		resp, err := r(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: fmt.Sprintf("WorkflowId = %q", id),
			PageSize: pageSize, NextPageToken: token})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.GetExecutions()...)
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return out, nil
		}
	}
}

// startedOf reads the started event of a run's history from it.
func startedOf(it client.HistoryEventIterator) (string, string, error) {
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return "", "", err
		}
		if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil {
			return a.GetFirstExecutionRunId(), a.GetContinuedExecutionRunId(), nil
		}
	}
	return "", "", errors.New("no started event")
}

type modelService struct{ m *temporalmodel.Model }

func (s modelService) start(_ context.Context, req temporalmodel.StartRequest) (temporalmodel.StartResponse, error) {
	return s.m.Start(req)
}
func (s modelService) terminate(_ context.Context, req temporalmodel.TerminateRequest) error {
	return s.m.Terminate(req)
}
func (s modelService) describe(_ context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return s.m.Describe(id, runID)
}
func (s modelService) closeEvent(ctx context.Context, id, runID string) (enumspb.EventType, string, error) {
	ev, err := s.m.CloseEvent(ctx, id, runID, false)
	return ev.GetEventType(), nextRunOf(ev), err
}
func (s modelService) outOfBand(_ context.Context, id, _, action string) error {
	var err error
	switch action {
	case "terminate":
		_, err = s.m.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "operator")
	case "cancel":
		_, err = s.m.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, "")
	case "complete":
		_, err = s.m.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, "")
	case "fail":
		_, err = s.m.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, "failed by script")
	case "can":
		s.m.ContinueAsNew(id)
	}
	return err
}

func (s modelService) list(ctx context.Context, id string, pageSize int32) ([]*workflowpb.WorkflowExecutionInfo, error) {
	return listAll(ctx, id, pageSize, func(_ context.Context, r *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
		return s.m.List(r)
	})
}
func (s modelService) started(ctx context.Context, id, runID string) (string, string, error) {
	return startedOf(temporalmodel.NewClient(s.m, "conformance", nil).GetWorkflowHistory(ctx, id, runID, false,
		enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT))
}

// realService is the Temporal dev server, through the raw workflow service (so that request IDs
// and policies are exactly the script's) and a worker running conformanceWorkflow.
type realService struct {
	c         client.Client
	namespace string
	taskQueue string
}

func (s realService) start(ctx context.Context, req temporalmodel.StartRequest) (temporalmodel.StartResponse, error) {
	if req.Signal != "" {
		resp, err := s.c.WorkflowService().SignalWithStartWorkflowExecution(ctx, &workflowservice.SignalWithStartWorkflowExecutionRequest{
			Namespace: s.namespace, WorkflowId: req.WorkflowID, RequestId: req.RequestID,
			WorkflowType: &commonpb.WorkflowType{Name: conformanceWorkflow},
			TaskQueue:    &taskqueuepb.TaskQueue{Name: s.taskQueue}, Memo: req.Memo, SignalName: req.Signal,
			WorkflowIdReusePolicy: req.Reuse, WorkflowIdConflictPolicy: req.Conflict,
		})
		return temporalmodel.StartResponse{RunID: resp.GetRunId(), Started: resp.GetStarted()}, err
	}
	resp, err := s.c.WorkflowService().StartWorkflowExecution(ctx, &workflowservice.StartWorkflowExecutionRequest{
		Namespace: s.namespace, WorkflowId: req.WorkflowID, RequestId: req.RequestID,
		WorkflowType: &commonpb.WorkflowType{Name: conformanceWorkflow},
		TaskQueue:    &taskqueuepb.TaskQueue{Name: s.taskQueue}, Memo: req.Memo,
		WorkflowIdReusePolicy: req.Reuse, WorkflowIdConflictPolicy: req.Conflict,
	})
	return temporalmodel.StartResponse{RunID: resp.GetRunId(), Started: resp.GetStarted()}, err
}

func (s realService) terminate(ctx context.Context, req temporalmodel.TerminateRequest) error {
	_, err := s.c.WorkflowService().TerminateWorkflowExecution(ctx, &workflowservice.TerminateWorkflowExecutionRequest{
		Namespace:           s.namespace,
		WorkflowExecution:   &commonpb.WorkflowExecution{WorkflowId: req.WorkflowID, RunId: req.RunID},
		FirstExecutionRunId: req.FirstRunID, Reason: req.Reason,
	})
	return err
}

func (s realService) describe(ctx context.Context, id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return s.c.DescribeWorkflowExecution(ctx, id, runID)
}

func (s realService) closeEvent(ctx context.Context, id, runID string) (enumspb.EventType, string, error) {
	it := s.c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	if !it.HasNext() {
		return 0, "", nil
	}
	ev, err := it.Next()
	if err != nil {
		return 0, "", err
	}
	return ev.GetEventType(), nextRunOf(ev), nil
}

func (s realService) outOfBand(ctx context.Context, id, runID, action string) error {
	var err error
	switch action {
	case "terminate":
		err = s.c.TerminateWorkflow(ctx, id, "", "operator")
	case "cancel":
		err = s.c.CancelWorkflow(ctx, id, runID)
	default:
		err = s.c.SignalWorkflow(ctx, id, runID, closeSignal, action)
	}
	if err != nil {
		return err
	}
	// The worker closes the run asynchronously: wait until it has (and, for continue-as-new, until
	// the next run is current).
	for {
		d, err := s.c.DescribeWorkflowExecution(ctx, id, "")
		if err != nil {
			return err
		}
		if d.GetWorkflowExecutionInfo().GetExecution().GetRunId() != runID ||
			d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run %s not closed by %s: %w", runID, action, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s realService) list(ctx context.Context, id string, pageSize int32) ([]*workflowpb.WorkflowExecutionInfo, error) {
	return listAll(ctx, id, pageSize, func(ctx context.Context, r *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
		r.Namespace = s.namespace
		return s.c.ListWorkflow(ctx, r)
	})
}

func (s realService) started(ctx context.Context, id, runID string) (string, string, error) {
	return startedOf(s.c.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT))
}

// nextRunOf is the run a close event's chain continued as, or "".
func nextRunOf(ev *historypb.HistoryEvent) string {
	switch {
	case ev.GetWorkflowExecutionContinuedAsNewEventAttributes() != nil:
		return ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
	case ev.GetWorkflowExecutionCompletedEventAttributes() != nil:
		return ev.GetWorkflowExecutionCompletedEventAttributes().GetNewExecutionRunId()
	case ev.GetWorkflowExecutionFailedEventAttributes() != nil:
		return ev.GetWorkflowExecutionFailedEventAttributes().GetNewExecutionRunId()
	}
	return ""
}

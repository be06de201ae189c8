package sim

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
)

// modelClient is the Temporal client.Client a Node of the node world gets: each method the Node's
// components call (takeover, reconciler, balance's reach check) delegates to the Temporal model's
// client behind the world's network (slowList: the reconciler world's, with slow visibility pages).
// The methods the model cannot answer are violations, not silent successes; the rest of
// client.Client is the embedded nil interface, so a call the Node has started to make since panics
// with this type's name in the stack.
type modelClient struct {
	client.Client
	m   *slowList
	w   *NodeWorld
	who string
}

var _ client.Client = (*modelClient)(nil)

func (c *modelClient) ExecuteWorkflow(ctx context.Context, o client.StartWorkflowOptions, workflow any, args ...any) (client.WorkflowRun, error) {
	return c.m.ExecuteWorkflow(ctx, o, workflow, args...)
}

func (c *modelClient) SignalWithStartWorkflow(ctx context.Context, workflowID, signalName string, signalArg any,
	o client.StartWorkflowOptions, workflow any, workflowArgs ...any) (client.WorkflowRun, error) {
	return c.m.SignalWithStartWorkflow(ctx, workflowID, signalName, signalArg, o, workflow, workflowArgs...)
}

func (c *modelClient) DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	return c.m.DescribeWorkflowExecution(ctx, workflowID, runID)
}

func (c *modelClient) TerminateWorkflowWithOptions(ctx context.Context, o client.TerminateWorkflowOptions) error {
	return c.m.TerminateWorkflowWithOptions(ctx, o)
}

func (c *modelClient) UpdateWorkflow(ctx context.Context, o client.UpdateWorkflowOptions) (client.WorkflowUpdateHandle, error) {
	return c.m.UpdateWorkflow(ctx, o)
}

func (c *modelClient) GetWorkflowHistory(ctx context.Context, workflowID, runID string, isLongPoll bool,
	filterType enumspb.HistoryEventFilterType) client.HistoryEventIterator {
	return c.m.GetWorkflowHistory(ctx, workflowID, runID, isLongPoll, filterType)
}

func (c *modelClient) ListWorkflow(ctx context.Context, req *listRequest) (*listResponse, error) {
	return c.m.ListWorkflow(ctx, req)
}

// CheckHealth answers as the service would to a process that can reach it: balance's reach check.
func (c *modelClient) CheckHealth(ctx context.Context, _ *client.CheckHealthRequest) (*client.CheckHealthResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.w.isDead(c.who) {
		return nil, serviceerror.NewUnavailable("sim: the process crashed")
	}
	return &client.CheckHealthResponse{}, nil
}

// errNotModelled is what a call the Temporal model cannot answer returns, besides a violation.
var errNotModelled = errors.New("sim: the Temporal model does not answer this call")

// DescribeTaskQueue is a progress check's: the model has no task queues (the world turns progress
// checks off).
func (c *modelClient) DescribeTaskQueue(context.Context, string, enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error) {
	c.w.violate("%s: DescribeTaskQueue called: %v", c.who, errNotModelled)
	return nil, errNotModelled
}

// QueryWorkflow is a progress check's: the model runs no workflow code.
func (c *modelClient) QueryWorkflow(context.Context, string, string, string, ...any) (converter.EncodedValue, error) {
	c.w.violate("%s: QueryWorkflow called: %v", c.who, errNotModelled)
	return nil, errNotModelled
}

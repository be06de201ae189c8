package temporalmodel

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// Describe answers DescribeWorkflowExecution: run runID of id, or its current run when runID is "".
func (m *Model) Describe(id, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.find(id, runID)
	if r == nil {
		if runID == "" {
			return nil, serviceerror.NewNotFound(fmt.Sprintf("workflow not found for ID: %s", id))
		}
		return nil, serviceerror.NewNotFound(msgNotFound)
	}
	info := &workflowpb.WorkflowExecutionInfo{
		Execution:  &commonpb.WorkflowExecution{WorkflowId: r.WorkflowID, RunId: r.RunID},
		Type:       &commonpb.WorkflowType{Name: r.WorkflowType},
		StartTime:  timestamppb.New(r.StartTime),
		Status:     r.Status,
		Memo:       r.Memo,
		FirstRunId: r.FirstRunID,
		TaskQueue:  r.TaskQueue,
	}
	if !r.Open() {
		info.CloseTime = timestamppb.New(r.CloseTime)
	}
	return &workflowservice.DescribeWorkflowExecutionResponse{
		ExecutionConfig:       &workflowpb.WorkflowExecutionConfig{TaskQueue: &taskqueuepb.TaskQueue{Name: r.TaskQueue}},
		WorkflowExecutionInfo: info,
	}, nil
}

package temporalmodel

import (
	"context"

	enumspb "go.temporal.io/api/enums/v1"
	failurepb "go.temporal.io/api/failure/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
)

// CloseEvent returns the close event of run runID of id (its current run when runID is ""). With
// longPoll it waits for an open run to close, until ctx ends (ctx's error); without, an open run
// has no close event yet (nil, nil), as the server's empty page.
func (m *Model) CloseEvent(ctx context.Context, id, runID string, longPoll bool) (*historypb.HistoryEvent, error) {
	m.mu.Lock()
	r := m.find(id, runID)
	if r == nil {
		m.mu.Unlock()
		return nil, serviceerror.NewNotFound(msgNotFound)
	}
	closed := r.closed
	m.mu.Unlock()
	if longPoll {
		select {
		case <-closed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.Open() {
		return nil, nil
	}
	return closeEvent(r), nil
}

// closeEvent is r's close event, with the attributes Baton reads (takeover's closeOf).
func closeEvent(r *Run) *historypb.HistoryEvent {
	ev := &historypb.HistoryEvent{}
	switch r.Status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		ev.EventType = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED
		ev.Attributes = &historypb.HistoryEvent_WorkflowExecutionCompletedEventAttributes{
			WorkflowExecutionCompletedEventAttributes: &historypb.WorkflowExecutionCompletedEventAttributes{NewExecutionRunId: r.NextRunID}}
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		ev.EventType = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
		ev.Attributes = &historypb.HistoryEvent_WorkflowExecutionFailedEventAttributes{
			WorkflowExecutionFailedEventAttributes: &historypb.WorkflowExecutionFailedEventAttributes{
				Failure: &failurepb.Failure{Message: r.Reason}, NewExecutionRunId: r.NextRunID}}
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		ev.EventType = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT
		ev.Attributes = &historypb.HistoryEvent_WorkflowExecutionTimedOutEventAttributes{
			WorkflowExecutionTimedOutEventAttributes: &historypb.WorkflowExecutionTimedOutEventAttributes{NewExecutionRunId: r.NextRunID}}
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		ev.EventType = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED
		ev.Attributes = &historypb.HistoryEvent_WorkflowExecutionCanceledEventAttributes{
			WorkflowExecutionCanceledEventAttributes: &historypb.WorkflowExecutionCanceledEventAttributes{}}
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		ev.EventType = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED
		ev.Attributes = &historypb.HistoryEvent_WorkflowExecutionTerminatedEventAttributes{
			WorkflowExecutionTerminatedEventAttributes: &historypb.WorkflowExecutionTerminatedEventAttributes{Reason: r.Reason}}
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		ev.EventType = enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW
		ev.Attributes = &historypb.HistoryEvent_WorkflowExecutionContinuedAsNewEventAttributes{
			WorkflowExecutionContinuedAsNewEventAttributes: &historypb.WorkflowExecutionContinuedAsNewEventAttributes{NewExecutionRunId: r.NextRunID}}
	}
	return ev
}

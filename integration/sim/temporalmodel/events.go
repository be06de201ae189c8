package temporalmodel

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// startedEvent is r's first event, with the attributes the dispatcher's carry-over reads: the input
// and the chain's first run (and the run it continued from, for continue-as-new).
func startedEvent(r *Run, continuedFrom string) *historypb.HistoryEvent {
	return &historypb.HistoryEvent{
		EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionStartedEventAttributes{
			WorkflowExecutionStartedEventAttributes: &historypb.WorkflowExecutionStartedEventAttributes{
				WorkflowType:            &commonpb.WorkflowType{Name: r.WorkflowType},
				TaskQueue:               &taskqueuepb.TaskQueue{Name: r.TaskQueue},
				Input:                   r.Input,
				Memo:                    r.Memo,
				FirstExecutionRunId:     r.FirstRunID,
				OriginalExecutionRunId:  r.RunID,
				ContinuedExecutionRunId: continuedFrom,
			}},
	}
}

// appendLocked adds ev to r's history with the next event ID and the model's time.
func (m *Model) appendLocked(r *Run, ev *historypb.HistoryEvent) int64 {
	ev.EventId = int64(len(r.events) + 1)
	ev.EventTime = timestamppb.New(m.opts.Clock.Now())
	r.events = append(r.events, ev)
	return ev.EventId
}

// Append adds events to the history of id's open run runID, as its workflow's decisions and the
// service's deliveries would (signals, accepted updates, activities scheduled and completed): the
// model does not run workflow code, so a world writes what its modelled workflow did. It returns the
// events' IDs (an activity's completion names its scheduled event's). A closed run's history is
// immutable: appending to it is an error, as is an unknown run.
func (m *Model) Append(id, runID string, events ...*historypb.HistoryEvent) ([]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.find(id, runID)
	if r == nil || runID == "" {
		return nil, serviceerror.NewNotFound(msgNotFound)
	}
	if !r.Open() {
		return nil, fmt.Errorf("temporalmodel: run %s of %s is closed; its history does not grow", runID, id)
	}
	ids := make([]int64, len(events))
	for i, ev := range events {
		ids[i] = m.appendLocked(r, proto.Clone(ev).(*historypb.HistoryEvent))
	}
	return ids, nil
}

// History returns a copy of the history of run runID of id (its current run when runID is ""), as
// it is now: an open run's may still grow.
func (m *Model) History(id, runID string) ([]*historypb.HistoryEvent, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.find(id, runID)
	if r == nil {
		return nil, serviceerror.NewNotFound(msgNotFound)
	}
	out := make([]*historypb.HistoryEvent, len(r.events))
	for i, ev := range r.events {
		out[i] = proto.Clone(ev).(*historypb.HistoryEvent)
	}
	return out, nil
}

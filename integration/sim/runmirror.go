package sim

import (
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	updatepb "go.temporal.io/api/update/v1"
	"go.temporal.io/sdk/converter"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
)

// The chain's runs run in the SDK's test environment, which keeps no history a Backlog activity
// could read. So that a successor reads the runs of a chain that stepped down with the real
// Backlog activity and its scan, the world mirrors into the Temporal model the events each run's
// history holds that the carry-over reads: the run's start with its input, the signals it was
// sent, the Dispatch updates it accepted, its DispatchBatch activities (scheduled at the first
// attempt, completed at the return) and its Backlog pages, its continue-as-new with the next run's
// input. The mirror is written as the world sees each event happen; it is the history as the
// workflow writes it, not read from it.

// modelClock stamps the model's runs: before the chain, an hour before it; then the mock time,
// strictly increasing, so that runs started in one instant keep their order.
type modelClock struct {
	clock.Clock
	w    *RunWorld
	mu   sync.Mutex
	last time.Time
}

func (c *modelClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.w.start.Add(-time.Hour)
	if c.w.mirrorOn() {
		t = c.w.clk.Now()
	}
	if !t.After(c.last) {
		t = c.last.Add(time.Microsecond)
	}
	c.last = t
	return t
}

func (w *RunWorld) mirrorOn() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.modelRun != ""
}

// mirrorStart starts the chain's first run in the model, with its input.
func (w *RunWorld) mirrorStart(requestID string, in dispatcher.Input) string {
	w.mu.Lock()
	w.modelRun = "starting"
	w.mu.Unlock()
	resp, err := w.tm.Start(temporalmodel.StartRequest{WorkflowID: w.id, RequestID: requestID,
		WorkflowType: dispatcher.WorkflowName, Input: w.payloads(in)})
	if err != nil {
		w.t.Fatal(err)
	}
	w.mu.Lock()
	w.modelRun = resp.RunID
	w.mu.Unlock()
	return resp.RunID
}

// mirrorContinue closes the model's run continued as new into one started with next.
func (w *RunWorld) mirrorContinue(next dispatcher.Input) {
	id := w.tm.ContinueAsNewWith(w.id, w.payloads(next))
	w.mu.Lock()
	w.modelRun = id
	w.mu.Unlock()
}

// mirrorTerminate terminates the model's open run (a step-down ends the run) and returns its ID.
func (w *RunWorld) mirrorTerminate() string {
	id, err := w.tm.Close(w.id, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "step-down")
	if err != nil {
		w.t.Fatal(err)
	}
	return id
}

func (w *RunWorld) mirrorSignal(r dispatcher.Request) { w.mirror(signalEvent(w.payloads(r))) }

func (w *RunWorld) mirrorUpdate(r dispatcher.Request) {
	w.mirror(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED,
		Attributes: &historypb.HistoryEvent_WorkflowExecutionUpdateAcceptedEventAttributes{
			WorkflowExecutionUpdateAcceptedEventAttributes: &historypb.WorkflowExecutionUpdateAcceptedEventAttributes{
				AcceptedRequest: &updatepb.Request{Input: &updatepb.Input{Name: dispatcher.UpdateDispatch, Args: w.payloads(r)}}}}})
}

// mirrorScheduled records an activity scheduled and returns its event ID (0 when the mirror's run
// is closed: the event came after the run ended, which the workflow would not have written).
func (w *RunWorld) mirrorScheduled(name string, input any) int64 {
	return w.mirror(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED,
		Attributes: &historypb.HistoryEvent_ActivityTaskScheduledEventAttributes{
			ActivityTaskScheduledEventAttributes: &historypb.ActivityTaskScheduledEventAttributes{
				ActivityType: &commonpb.ActivityType{Name: name}, Input: w.payloads(input)}}})
}

func (w *RunWorld) mirrorCompleted(scheduled int64, result any) {
	if scheduled == 0 {
		return
	}
	w.mirror(&historypb.HistoryEvent{EventType: enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
		Attributes: &historypb.HistoryEvent_ActivityTaskCompletedEventAttributes{
			ActivityTaskCompletedEventAttributes: &historypb.ActivityTaskCompletedEventAttributes{
				ScheduledEventId: scheduled, Result: w.payloads(result)}}})
}

// mirror appends ev to the model's open run and returns its event ID; an event of a run that is
// closed already (an activity that returned after a step-down ended its run) is traced and dropped.
func (w *RunWorld) mirror(ev *historypb.HistoryEvent) int64 {
	w.mu.Lock()
	run := w.modelRun
	w.mu.Unlock()
	ids, err := w.tm.Append(w.id, run, ev)
	if err != nil {
		w.rec.Add("world", "history of a closed run: %v dropped", ev.GetEventType())
		return 0
	}
	return ids[0]
}

func (w *RunWorld) payloads(v any) *commonpb.Payloads {
	p, err := converter.GetDefaultDataConverter().ToPayloads(v)
	if err != nil {
		w.t.Fatal(err)
	}
	return p
}

package takeover

import (
	"context"
	"errors"
	"fmt"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/serviceerror"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// ClosedError says how a supervised run closed when it did not continue as new.
type ClosedError struct {
	WorkflowID string
	RunID      string
	// Status is how the run closed; UNSPECIFIED when Temporal no longer knows the run (NotFound).
	Status enumspb.WorkflowExecutionStatus
	// Detail is the termination reason or the failure message, when there is one.
	Detail string
}

func (e *ClosedError) Error() string {
	msg := fmt.Sprintf("%s: %s run %s %s", ErrRunClosed, e.WorkflowID, e.RunID, e.Reason())
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap makes a ClosedError match ErrRunClosed.
func (e *ClosedError) Unwrap() error { return ErrRunClosed }

// Reason is the close as a short lower-case word (completed, failed, canceled, terminated,
// timed_out, not_found); it is a metric attribute.
func (e *ClosedError) Reason() string { return statusName(e.Status) }

func statusName(s enumspb.WorkflowExecutionStatus) string {
	if s == enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED {
		return "not_found"
	}
	// The proto enum's name (WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW), not String()'s CamelCase.
	return strings.ToLower(strings.TrimPrefix(enumspb.WorkflowExecutionStatus_name[int32(s)], "WORKFLOW_EXECUTION_STATUS_"))
}

// Watch supervises the owner's run for its term. It long-polls Temporal for the close of the chain's
// current run, so a close is seen at once, not at the next heartbeat. It returns:
//
//   - (next, nil) when the run continued as new (or was retried: the chain goes on): next names the
//     chain's new current run, which heartbeats, status and step-down must follow. Call Watch again.
//   - (run, err) with a *ClosedError (matching ErrRunClosed) when the run closed for good: an
//     operator's terminate or cancel, a workflow that returned, failed or timed out. The owner replaces
//     it within the term (Take again), or resigns.
//   - (run, err) with the context's cause when ctx or the term ended.
//
// Transient errors of the long poll are retried with jittered backoff while the term lives.
func (m *Manager) Watch(ctx context.Context, term Term, run Run) (Run, error) {
	if run.WorkflowID == "" || run.RunID == "" {
		return run, fmt.Errorf("takeover: watch needs a workflow ID and a run ID, got %q/%q", run.WorkflowID, run.RunID)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(term.Context(), func() { cancel(context.Cause(term.Context())) })
	defer stop()
	log := m.log.With(zap.String("project", run.Owner.Project), zap.String("queue", run.Owner.Queue),
		zap.Int64("token", run.Owner.Token), zap.String("workflow_id", run.WorkflowID))
	backoff := m.cfg.RetryMin
	for {
		// The long poll is bounded and followed by a plain read, so a close is seen within WatchInterval
		// even when the server's long poll is not woken by it. It is cut by a timer, not a deadline: the
		// server answers a long poll an instant before its caller's deadline, and the SDK re-polls every
		// empty answer, which would spin for the deadline's last second.
		pctx, stop := context.WithCancel(ctx)
		timer := m.cfg.Clock.AfterFunc(m.cfg.WatchInterval, stop)
		ev, err := m.closeEvent(pctx, run, true)
		timer.Stop()
		stop()
		if ctx.Err() == nil && pctx.Err() != nil {
			var open bool
			if open, err = m.isOpen(ctx, run); open {
				continue
			}
			if err == nil {
				ev, err = m.closeEvent(ctx, run, false)
			}
		}
		if ctx.Err() != nil {
			return run, context.Cause(ctx)
		}
		var notFound *serviceerror.NotFound
		// A NotFound is the run's end, not a server coming back: Temporal (v1.32) answers calls it
		// cannot serve yet with Unavailable (a shard still being acquired: "shard status unknown";
		// a shard not owned: ShardOwnershipLost, which its frontend passes on as Unavailable), and
		// loads its namespaces before it serves (a NamespaceNotFound is no NotFound, and is retried
		// here). NotFound comes from persistence, when the run's rows are gone.
		// TestTemporalRestartReplacesNoRun (integration/tests/node) holds it so.
		switch {
		case errors.As(err, &notFound):
			m.metrics.closed(ctx, run.Owner.Project, run.Owner.Queue, "not_found")
			return run, &ClosedError{WorkflowID: run.WorkflowID, RunID: run.RunID, Detail: err.Error()}
		case err != nil:
			if !clock.Sleep(ctx, m.cfg.Clock, clock.Jitter(m.cfg.Clock, backoff)) {
				return run, context.Cause(ctx)
			}
			backoff = min(2*backoff, m.cfg.RetryMax)
			continue
		}
		status, next, detail := closeOf(ev)
		m.metrics.closed(ctx, run.Owner.Project, run.Owner.Queue, statusName(status))
		if next != "" {
			log.Info("dispatcher run continued; following the chain", zap.String("run_id", run.RunID),
				zap.String("next_run_id", next), zap.String("status", statusName(status)))
			run.RunID = next
			return run, nil
		}
		return run, &ClosedError{WorkflowID: run.WorkflowID, RunID: run.RunID, Status: status, Detail: detail}
	}
}

// isOpen describes the run.
func (m *Manager) isOpen(ctx context.Context, run Run) (bool, error) {
	actx, cancel := context.WithTimeout(ctx, m.cfg.AttemptTimeout)
	defer cancel()
	resp, err := m.client.DescribeWorkflowExecution(actx, run.WorkflowID, run.RunID)
	if err != nil {
		return false, err
	}
	return resp.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}

// closeEvent reads the close event of the run, long-polling for it with longPoll; without, the run
// must be closed already.
func (m *Manager) closeEvent(ctx context.Context, run Run, longPoll bool) (*historypb.HistoryEvent, error) {
	iter := m.client.GetWorkflowHistory(ctx, run.WorkflowID, run.RunID, longPoll, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return nil, err
		}
		if status, _, _ := closeOf(ev); status != enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED {
			return ev, nil
		}
	}
	return nil, fmt.Errorf("takeover: history of %s run %s ended without a close event", run.WorkflowID, run.RunID)
}

// closeOf reads a close event: how the run closed, the run the chain continued as (if any), and the
// reason or failure message.
func closeOf(ev *historypb.HistoryEvent) (status enumspb.WorkflowExecutionStatus, next, detail string) {
	switch ev.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
		a := ev.GetWorkflowExecutionCompletedEventAttributes()
		return enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, a.GetNewExecutionRunId(), ""
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED:
		a := ev.GetWorkflowExecutionFailedEventAttributes()
		return enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, a.GetNewExecutionRunId(), a.GetFailure().GetMessage()
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT:
		a := ev.GetWorkflowExecutionTimedOutEventAttributes()
		return enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT, a.GetNewExecutionRunId(), ""
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED:
		return enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, "", ""
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED:
		return enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "", ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
		a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes()
		return enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, a.GetNewExecutionRunId(), ""
	}
	return enumspb.WORKFLOW_EXECUTION_STATUS_UNSPECIFIED, "", ""
}

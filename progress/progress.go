// Package progress judges whether a dispatcher run makes progress, from Temporal's view of it: one
// Running run with the right owner is not enough if nothing handles what it accepts.
//
// Check asks Temporal about a run (DescribeWorkflowExecution; DescribeTaskQueue of its task queue
// when a workflow task waits for a worker; the run's dispatcher.QueryProgress while it has work in
// flight) and names the first cause of a stall it finds, in this order:
//
//   - CauseUnreachable: Temporal does not answer the owner (a server restart, a partition);
//   - CauseNoPollers: a workflow task has waited longer than Interval and no worker has polled the
//     run's task queue within PollerWindow, so it cannot run (for example, no process registers the
//     dispatcher worker; every run starts with a workflow task, so a takeover shows it at once). A
//     task sent to a stopped worker's sticky queue waits there first, for the worker's sticky
//     schedule-to-start timeout (1 s with dispatcher.WorkerOptions), and counts from its reschedule;
//   - CauseTaskStuck: a workflow task of the run has been pending longer than TaskStuckAfter (held by
//     a worker that hangs), or is on its FailingAttempts-th attempt (it fails or times out on every
//     one: a panic, a non-determinism error after a deploy);
//   - CauseDispatchFailing: a dispatch activity is on its FailingAttempts-th attempt, every earlier
//     one failed (the ledger or the application's handler fails every attempt);
//   - CauseOldestPending: the oldest request the run accepted has waited longer than PendingMax.
//
// A run that is not Baton's dispatcher (it does not answer QueryProgress) is judged by the first four
// only. The owner (baton.Node) checks each run it leads every Interval and shows the result in its
// readiness, its status and the baton.dispatch.stalled gauge; `baton status` runs the same Check
// from outside. A healthy idle run costs one Temporal call per check; one with dispatches in flight
// adds a query, answered by a worker.
package progress

import (
	"context"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/baton-run/baton/dispatcher"
)

// Cause is why a run makes no progress; "" when it does.
type Cause string

// The causes, in the order Check looks for them.
const (
	CauseUnreachable     Cause = "temporal_unreachable"
	CauseNoPollers       Cause = "no_pollers"
	CauseTaskStuck       Cause = "workflow_task_stuck"
	CauseDispatchFailing Cause = "dispatch_failing"
	CauseOldestPending   Cause = "oldest_pending"
)

// Causes lists every Cause, in the order Check looks for them.
var Causes = []Cause{CauseUnreachable, CauseNoPollers, CauseTaskStuck, CauseDispatchFailing, CauseOldestPending}

// Temporal is what Check needs of a Temporal client; client.Client satisfies it.
type Temporal interface {
	DescribeWorkflowExecution(ctx context.Context, workflowID, runID string) (*workflowservice.DescribeWorkflowExecutionResponse, error)
	DescribeTaskQueue(ctx context.Context, taskQueue string, taskQueueType enumspb.TaskQueueType) (*workflowservice.DescribeTaskQueueResponse, error)
	QueryWorkflow(ctx context.Context, workflowID, runID, queryType string, args ...any) (converter.EncodedValue, error)
}

// Report is what one Check found.
type Report struct {
	// Cause is the first cause of a stall found, "" for none; Detail says it for people.
	Cause  Cause  `json:"cause,omitempty"`
	Detail string `json:"detail,omitempty"`
	// CheckedAt is when the check ran, by the checker's clock.
	CheckedAt time.Time `json:"checked_at"`
	// Pollers counts the workers that polled the run's task queue within PollerWindow; -1 when the
	// check did not ask (no workflow task waited for a worker).
	Pollers int `json:"pollers"`
	// Progress is the run's answer to dispatcher.QueryProgress; nil when it gave none.
	Progress *dispatcher.Progress `json:"progress,omitempty"`
	// OldestPendingAge is how long the oldest request the run holds has waited (0: none).
	OldestPendingAge time.Duration `json:"oldest_pending_age_ns,omitempty"`
}

// Stalled says whether the report names a cause.
func (r Report) Stalled() bool { return r.Cause != "" }

// Check judges the run (workflowID, runID) now, each call bounded by cfg.CallTimeout. A run that is
// no longer running is not judged (its owner's watch deals with it): the report has no cause. A
// healthy idle run costs one call; the task queue's pollers are asked only when a workflow task has
// waited for one longer than Interval, and the run's progress only while it has dispatches in flight
// (a run holds waiting requests only then, or while a workflow task is pending).
func Check(ctx context.Context, tc Temporal, cfg Config, workflowID, runID string, now time.Time) Report {
	cctx, cancel := context.WithTimeout(ctx, cfg.WithDefaults().CallTimeout)
	desc, err := tc.DescribeWorkflowExecution(cctx, workflowID, runID)
	cancel()
	if err != nil {
		return Report{CheckedAt: now, Pollers: -1, Cause: CauseUnreachable, Detail: fmt.Sprintf("describe run %s: %v", runID, err)}
	}
	return Judge(ctx, tc, cfg, desc, now)
}

// Judge is Check for a run the caller has just described (desc): it asks Temporal only the rest.
func Judge(ctx context.Context, tc Temporal, cfg Config, desc *workflowservice.DescribeWorkflowExecutionResponse, now time.Time) Report {
	cfg = cfg.WithDefaults()
	rep := Report{CheckedAt: now, Pollers: -1}
	stall := func(c Cause, format string, args ...any) Report {
		rep.Cause, rep.Detail = c, fmt.Sprintf(format, args...)
		return rep
	}
	if desc.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return rep
	}
	var err error
	wt := desc.GetPendingWorkflowTask()
	if wt != nil && wt.GetState() == enumspb.PENDING_WORKFLOW_TASK_STATE_SCHEDULED && now.Sub(taskSince(wt)) > cfg.Interval {
		taskQueue := desc.GetExecutionConfig().GetTaskQueue().GetName()
		if rep.Pollers, err = pollers(ctx, tc, cfg, taskQueue, now); err != nil {
			return stall(CauseUnreachable, "describe task queue %s: %v", taskQueue, err)
		}
		if rep.Pollers == 0 {
			return stall(CauseNoPollers, "no worker polled task queue %s in the last %s, and a workflow task has waited %s: no process runs the dispatcher's Temporal worker",
				taskQueue, cfg.PollerWindow, now.Sub(taskSince(wt)).Round(time.Second))
		}
	}
	if c, detail := pendingWork(desc, cfg, now); c != "" {
		return stall(c, "%s", detail)
	}
	if len(desc.GetPendingActivities()) == 0 && wt == nil {
		return rep // idle, or waiting for a timer: nothing it holds is being held up
	}
	exec := desc.GetWorkflowExecutionInfo().GetExecution()
	rep.Progress = query(ctx, tc, cfg, exec.GetWorkflowId(), exec.GetRunId())
	if p := rep.Progress; p != nil && !p.OldestAccepted.IsZero() {
		rep.OldestPendingAge = max(0, now.Sub(p.OldestAccepted))
		if rep.OldestPendingAge > cfg.PendingMax {
			return stall(CauseOldestPending, "the oldest of %d request(s) it holds was accepted %s ago (more than %s)",
				p.Waiting+p.InFlight, rep.OldestPendingAge.Round(time.Second), cfg.PendingMax)
		}
	}
	return rep
}

// taskSince is when a pending workflow task's current attempt was scheduled: the server restamps
// a retried task, so an age measured from it restarts with every attempt (pendingWork counts the
// attempts too).
func taskSince(wt *workflowpb.PendingWorkflowTaskInfo) time.Time {
	if wt.GetOriginalScheduledTime() != nil {
		return wt.GetOriginalScheduledTime().AsTime()
	}
	return wt.GetScheduledTime().AsTime()
}

// pollers counts the workers that polled taskQueue for workflow tasks within cfg.PollerWindow.
func pollers(ctx context.Context, tc Temporal, cfg Config, taskQueue string, now time.Time) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	defer cancel()
	tq, err := tc.DescribeTaskQueue(cctx, taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, p := range tq.GetPollers() {
		if now.Sub(p.GetLastAccessTime().AsTime()) <= cfg.PollerWindow {
			n++
		}
	}
	return n, nil
}

// pendingWork judges the run's pending workflow task and dispatch activities.
func pendingWork(desc *workflowservice.DescribeWorkflowExecutionResponse, cfg Config, now time.Time) (Cause, string) {
	if wt := desc.GetPendingWorkflowTask(); wt != nil {
		// A task retried FailingAttempts times is stuck whatever its age: the server restamps a
		// retried task's schedule time, and backs retries off, so age alone would see it late.
		if age := now.Sub(taskSince(wt)); age > cfg.TaskStuckAfter || wt.GetAttempt() >= cfg.FailingAttempts {
			state := strings.ToLower(strings.TrimPrefix(wt.GetState().String(), "PENDING_WORKFLOW_TASK_STATE_"))
			return CauseTaskStuck, fmt.Sprintf("a workflow task has been pending for %s (%s, attempt %d)", age.Round(time.Second), state, wt.GetAttempt())
		}
	}
	for _, a := range desc.GetPendingActivities() {
		name := a.GetActivityType().GetName()
		if (name == dispatcher.ActivityDispatch || name == dispatcher.ActivityDispatchBatch) && a.GetAttempt() >= cfg.FailingAttempts {
			return CauseDispatchFailing, fmt.Sprintf("activity %s is on attempt %d, every earlier one failed: %s", name, a.GetAttempt(), a.GetLastFailure().GetMessage())
		}
	}
	return "", ""
}

// query asks the run's progress; nil when it does not answer (not Baton's dispatcher, or busy).
func query(ctx context.Context, tc Temporal, cfg Config, workflowID, runID string) *dispatcher.Progress {
	cctx, cancel := context.WithTimeout(ctx, cfg.CallTimeout)
	defer cancel()
	v, err := tc.QueryWorkflow(cctx, workflowID, runID, dispatcher.QueryProgress)
	var p dispatcher.Progress
	if err == nil {
		err = v.Get(&p)
	}
	if err != nil {
		return nil
	}
	return &p
}

package opscli

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/takeover"
)

// CheckRunsFailing is the verify check of a queue whose latest dispatcher runs closed FAILED or
// TIMED_OUT right after their start, two or more in a row (the owner's readiness fails with
// baton.ErrRunsFailing meanwhile): its start code or its first workflow task fails every time.
const CheckRunsFailing = "runs-failing"

// failingRunsShown is how many of a queue's latest runs status lists when its run is not open, or
// opened less than ownership.RunFailingWithin ago, to tell whether its runs keep failing.
const failingRunsShown = 10

// failStreak counts the runs (oldest first in runs) that closed FAILED or TIMED_OUT within
// ownership.RunFailingWithin of their start, in a row up to the newest closed one, as the owner's
// ownership.Snapshot.RunsFailing does: a newest run open for less than that is the next replacement,
// one open for longer ends the streak, and so does a streak whose last close is older than that.
// Only runs started after -since count (include; nil: all). It returns the streak and its last run.
func failStreak(runs []pastRun, now time.Time, include func(pastRun) bool) (int, pastRun) {
	n, last := 0, pastRun{}
	for i := len(runs) - 1; i >= 0; i-- {
		r := runs[i]
		if include != nil && !include(r) {
			break
		}
		if r.close.IsZero() {
			if i == len(runs)-1 && now.Sub(r.start) < ownership.RunFailingWithin {
				continue
			}
			break
		}
		failed := r.status == enumspb.WORKFLOW_EXECUTION_STATUS_FAILED || r.status == enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT
		if !failed || r.close.Sub(r.start) >= ownership.RunFailingWithin {
			break
		}
		if n == 0 {
			last = r
		}
		n++
	}
	if n < 2 || now.Sub(last.close) >= ownership.RunFailingWithin {
		return 0, pastRun{}
	}
	return n, last
}

// failingDetail is the verify detail of a streak.
func failingDetail(n int, last pastRun) string {
	return fmt.Sprintf("%d runs in a row closed failed within %v of their start; the last, %s, %s %v after it started",
		n, ownership.RunFailingWithin, last.runID, statusName(last.status), last.close.Sub(last.start).Round(time.Millisecond))
}

// listPastRuns returns up to max runs of the workflow id, oldest first, each with its owner memo.
func listPastRuns(ctx context.Context, tc client.Client, id string, max int, timeout time.Duration, wait func(context.Context) error) ([]pastRun, error) {
	var runs []pastRun
	err := listRuns(ctx, tc, "WorkflowId = "+strconv.Quote(id), max, timeout, wait,
		func(info *workflowpb.WorkflowExecutionInfo) error {
			owner, found, err := takeover.DecodeOwner(nil, info.GetMemo())
			if err != nil || !found {
				return fmt.Errorf("run %s of %s: no readable owner memo (%v)", info.GetExecution().GetRunId(), id, err)
			}
			r := pastRun{runID: info.GetExecution().GetRunId(), status: info.GetStatus(), start: info.GetStartTime().AsTime(), owner: owner}
			if info.GetCloseTime() != nil {
				r.close = info.GetCloseTime().AsTime()
			}
			runs = append(runs, r)
			return nil
		})
	if err != nil {
		return runs, fmt.Errorf("list the runs of %s: %w", id, err)
	}
	slices.SortFunc(runs, func(a, b pastRun) int { return a.start.Compare(b.start) })
	return runs, nil
}

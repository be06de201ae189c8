package opscli

import (
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/ownership"
)

func TestFailStreak(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	failed, timedOut := enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT
	terminated, running := enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	// run builds a run that started ago before now and lasted for (open when for is 0).
	run := func(id string, st enumspb.WorkflowExecutionStatus, ago, lasted time.Duration) pastRun {
		r := pastRun{runID: id, status: st, start: now.Add(-ago)}
		if lasted > 0 {
			r.close = r.start.Add(lasted)
		}
		return r
	}
	long := ownership.RunFailingWithin + time.Second
	for _, c := range []struct {
		name string
		runs []pastRun
		want int
	}{
		{"nothing", nil, 0},
		{"one failure is no streak", []pastRun{run("a", failed, 10*time.Second, time.Second)}, 0},
		{"two in a row", []pastRun{run("a", failed, 20*time.Second, time.Second), run("b", timedOut, 10*time.Second, time.Second)}, 2},
		{"the young replacement does not end it", []pastRun{run("a", failed, 30*time.Second, time.Second),
			run("b", failed, 20*time.Second, time.Second), run("c", running, 5*time.Second, 0)}, 2},
		{"a run open for a while ends it", []pastRun{run("a", failed, 3*long, time.Second),
			run("b", failed, 2*long, time.Second), run("c", running, long, 0)}, 0},
		{"a terminate ends it", []pastRun{run("a", failed, 30*time.Second, time.Second),
			run("b", terminated, 20*time.Second, time.Second), run("c", failed, 10*time.Second, time.Second)}, 0},
		{"a failure after a long life is not a failed start", []pastRun{run("a", failed, 3*long, 2*long),
			run("b", failed, 10*time.Second, time.Second)}, 0},
		{"an old streak is over", []pastRun{run("a", failed, 5*long, time.Second), run("b", failed, 4*long, time.Second)}, 0},
	} {
		if got, _ := failStreak(c.runs, now, nil); got != c.want {
			t.Errorf("%s: streak %d, want %d", c.name, got, c.want)
		}
	}
	// -since: runs before it do not count.
	runs := []pastRun{run("a", failed, 30*time.Second, time.Second), run("b", failed, 20*time.Second, time.Second)}
	if got, _ := failStreak(runs, now, func(r pastRun) bool { return r.start.After(now.Add(-25 * time.Second)) }); got != 0 {
		t.Errorf("with -since between the two: streak %d, want 0", got)
	}
}

func TestDispatchCellShowsRunsFailing(t *testing.T) {
	if got := dispatchCellText(runCell{Known: true, RunsFailing: 3}); got != "RUNS-FAILING:3" {
		t.Errorf("DISPATCH %q", got)
	}
}

package opscli

import (
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/takeover"
)

// A chain that continued as new is one owner's dispatcher going on, unless the run after it carries
// a lower token: that is a stale owner's run started behind the chain, the case CheckTokenOrder is for.
func TestJudgeContinuedAsNew(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	can, running := enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	run := func(id string, st enumspb.WorkflowExecutionStatus, token int64, at int) pastRun {
		r := pastRun{runID: id, status: st, start: t0.Add(time.Duration(at) * time.Second), owner: takeover.Owner{Token: token}}
		if st != running {
			r.close = r.start.Add(time.Second)
		}
		return r
	}
	for _, c := range []struct {
		name string
		runs []pastRun
		want []string
	}{
		{"the same owner's chain", []pastRun{run("a", can, 5, 0), run("b", running, 5, 1)}, nil},
		{"a later owner's run after the chain", []pastRun{run("a", can, 5, 0), run("b", running, 7, 2)}, nil},
		{"a stale owner's run after the chain", []pastRun{run("a", can, 5, 0), run("b", running, 3, 2)}, []string{CheckTokenOrder}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var h historyReader
			found, _, err := h.judge(t.Context(), "q1", "dispatcher-p-q1", c.runs)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, v := range found {
				got = append(got, v.Check)
			}
			if len(got) != len(c.want) || len(got) > 0 && got[0] != c.want[0] {
				t.Fatalf("violations %v, want %v", got, c.want)
			}
		})
	}
}

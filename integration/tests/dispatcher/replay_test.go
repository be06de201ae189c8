package dispatcher_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/temporalproto"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/dispatcher"
)

// recordDir, when set, is where TestCurrentRunsReplay saves the histories it replays, to refresh
// dispatcher/testdata after a change to the workflow's commands (next to a workflow.GetVersion).
const recordDir = "BATON_RECORD_HISTORIES"

// Every run of this release replays with its code: a chain that continued as new with signals and
// an update in it, and the next owner's run that carried the chain's backlog over. A command that
// depends on something outside the history (a map's order, the worker's options without the
// SideEffect) fails here.
func TestCurrentRunsReplay(t *testing.T) {
	e := newEnv(t)
	opts := dispatcher.RegisterOptions{HistoryLimit: 20, MaxConcurrent: 4}
	stop := e.workerWith(t, &handled{}, opts)
	runA, termA := e.take(t, "node-a")
	var keys []string
	for i := range 6 {
		r := request(fmt.Sprintf("replay-%d", i))
		keys = append(keys, r.Key())
		e.signal(t, r)
	}
	e.signal(t, request("replay-0")) // a duplicate
	upd := request("replay-update")
	keys = append(keys, upd.Key())
	if _, err := e.producer(t).Dispatch(t.Context(), project, e.queue, upd); err != nil {
		t.Fatal(err)
	}
	e.waitDone(t, keys)
	// Two requests node-a's run accepts while no worker runs it; node-b's run carries them over.
	stop()
	left := []dispatcher.Request{request("replay-left-1"), request("replay-left-2")}
	for _, r := range left {
		keys = append(keys, r.Key())
		e.signal(t, r)
	}
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	runB, _ := e.take(t, "node-b")
	e.workerWith(t, &handled{}, opts)
	e.waitDone(t, keys)
	e.state(t, e.runOf(t, runB), func(s dispatcher.State) bool { return s.CarriedOver >= int64(len(left)) && len(s.Backlog) == 0 })

	// node-a's chain from its first run, followed across continue-as-new; then node-b's open run.
	var runs []string
	for id := runA.RunID; id != ""; {
		runs = append(runs, id)
		hist := e.history(t, runA.WorkflowID, id)
		id = hist.Events[len(hist.Events)-1].GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
	}
	if len(runs) < 2 {
		t.Fatalf("node-a's chain never continued as new (runs %v); the test needs a smaller HistoryLimit", runs)
	}
	runs = append(runs, runB.RunID)
	for i, id := range runs {
		hist := e.history(t, runA.WorkflowID, id)
		r := worker.NewWorkflowReplayer()
		r.RegisterWorkflowWithOptions(dispatcher.Workflow, workflow.RegisterOptions{Name: dispatcher.WorkflowName})
		if err := r.ReplayWorkflowHistory(nil, hist); err != nil {
			t.Errorf("run %d (%s, %d events) does not replay: %v", i, id, len(hist.Events), err)
		}
		if dir := os.Getenv(recordDir); dir != "" {
			b, err := temporalproto.CustomJSONMarshalOptions{Indent: "  "}.Marshal(hist)
			if err != nil {
				t.Fatal(err)
			}
			name := fmt.Sprintf("current-run%d.json", i)
			if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// history reads a run's whole history.
func (e *env) history(t *testing.T, workflowID, runID string) *historypb.History {
	t.Helper()
	it := e.tc.GetWorkflowHistory(t.Context(), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	h := &historypb.History{}
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		h.Events = append(h.Events, ev)
	}
	return h
}

package dispatcher

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// The histories in testdata were recorded against a real Temporal server: legacy-* by the reference
// dispatcher of the release before concurrent dispatch (one request at a time, no carry-over), and
// current-* by this one. A worker upgraded in place picks up the workflow tasks of runs the previous
// release started, so each must replay without a nondeterminism error. Refresh the current-* files
// with integration/dispatcher's TestCurrentRunsReplay (BATON_RECORD_HISTORIES=<dir>).
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no recorded histories in testdata")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Workflow, workflow.RegisterOptions{Name: WorkflowName})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay %s: %v", f, err)
			}
		})
	}
}

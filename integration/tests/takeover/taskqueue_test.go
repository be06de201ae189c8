package takeover_test

import (
	"testing"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// Two projects with a queue of the same name in one namespace: each dispatcher run is started on its
// own project's task queue, so one project's workers never run the other's dispatcher tasks.
func TestProjectsSharingAQueueNameGetTheirOwnTaskQueues(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	n := e.node(t, "node-a", election.Config{}, takeover.Config{StepDown: takeover.LeaveRunning})
	seen := map[string]string{} // task queue -> project
	for _, p := range []string{"billing", "shipping"} {
		term, err := n.el.Campaign(t.Context(), p, "orders", n.id)
		if err != nil {
			t.Fatalf("campaign %s/orders: %v", p, err)
		}
		run, err := n.mgr.Take(t.Context(), term)
		if err != nil {
			t.Fatalf("takeover of %s/orders: %v", p, err)
		}
		desc, err := e.tc.DescribeWorkflowExecution(t.Context(), run.WorkflowID, run.RunID)
		if err != nil {
			t.Fatal(err)
		}
		got := desc.GetExecutionConfig().GetTaskQueue().GetName()
		if want := takeover.DefaultTaskQueue(p, "orders"); got != want {
			t.Fatalf("%s/orders's run %s is on task queue %q, want %q", p, run.RunID, got, want)
		}
		if other, ok := seen[got]; ok {
			t.Fatalf("%s and %s share the task queue %q of their dispatcher runs", other, p, got)
		}
		seen[got] = p
	}
}

package testkit

import (
	"testing"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/takeover"
)

// ClosingDispatcher is the registered name of a dispatcher workflow whose run ends on request, for
// tests of what happens when a run closes behind its owner's back: signal SignalClose with
// "continue" (continue-as-new with the same owner), "complete" (it returns) or "fail" (it fails). It
// honours cancellation. Use it as takeover.Config.WorkflowType.
const (
	ClosingDispatcher = "test.ClosingDispatcher"
	SignalClose       = "test.close"
)

func closingDispatcher(ctx workflow.Context, owner takeover.Owner) error {
	var how string
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(workflow.GetSignalChannel(ctx, SignalClose), func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, &how) })
	sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
	sel.Select(ctx)
	if err := ctx.Err(); err != nil {
		return err
	}
	switch how {
	case "continue":
		return workflow.NewContinueAsNewError(ctx, ClosingDispatcher, owner)
	case "fail":
		return temporal.NewNonRetryableApplicationError("asked to fail", "test", nil)
	}
	return nil
}

// RunClosingDispatcher runs ClosingDispatcher on the Temporal task queue until the test ends.
func RunClosingDispatcher(t testing.TB, tc client.Client, taskQueue string) {
	t.Helper()
	w := worker.New(tc, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(closingDispatcher, workflow.RegisterOptions{Name: ClosingDispatcher})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Stop()
		// The SDK keeps cached workflow runs (and their goroutines) process-wide after a worker stops.
		worker.PurgeStickyWorkflowCache()
	})
}

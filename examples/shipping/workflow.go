package shipping

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/dispatcher"
)

// WorkflowType is the registered name of the dispatcher workflow (baton.Config.Takeover.WorkflowType).
const WorkflowType = "shipping.Dispatcher"

// Input is what each dispatcher run starts with; the start hook builds it (app.go). dispatcher.Input
// is Baton's part: the Owner (the run's fencing data, checked before it acts) and what a run hands
// the next one of its chain when it continues as new.
type Input struct {
	dispatcher.Input
	Region    string `json:"region"`
	BatchSize int    `json:"batch_size"`
}

// Dispatcher is the app's own dispatcher workflow: Baton's dispatcher (dispatcher.Serve) with the
// app's start, an announcement of the owner once its token is confirmed. Serve comes first, so
// Baton's update handler is registered before the announcement's activity is scheduled: a request a
// Producer sends meanwhile is accepted and waits for it. Continue-as-new keeps this workflow's type
// and Input (Next), and the run serves until it is terminated (a takeover or a step-down does that).
func Dispatcher(ctx workflow.Context, in Input) error {
	return dispatcher.Serve(ctx, in.Input, dispatcher.ServeOptions{
		Start: func(ctx workflow.Context) error {
			ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				StartToCloseTimeout: 10 * time.Second,
				RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5, NonRetryableErrorTypes: []string{ErrTypeSuperseded}},
			})
			var a *Activities
			return workflow.ExecuteActivity(ctx, a.Announce, in).Get(ctx, nil)
		},
		Next: func(next dispatcher.Input) []any {
			in.Input = next
			return []any{in}
		},
	})
}

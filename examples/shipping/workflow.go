package shipping

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/takeover"
)

// WorkflowType is the registered name of the dispatcher workflow (baton.Config.Takeover.WorkflowType).
const WorkflowType = "shipping.Dispatcher"

// SignalStop ends a run gracefully (Baton replaces a run that ends behind its owner's back).
const SignalStop = "shipping.stop"

// Input is what each dispatcher run starts with; the start hook builds it (app.go). Owner is Baton's
// fencing data: the run checks it before it acts.
type Input struct {
	Owner     takeover.Owner
	Region    string
	BatchSize int
}

// Dispatcher announces itself once its token is confirmed, then serves until it is terminated (a
// takeover or a step-down does that) or asked to stop.
func Dispatcher(ctx workflow.Context, in Input) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5, NonRetryableErrorTypes: []string{ErrTypeSuperseded}},
	})
	var a *Activities
	if err := workflow.ExecuteActivity(ctx, a.Announce, in).Get(ctx, nil); err != nil {
		return err
	}
	workflow.GetSignalChannel(ctx, SignalStop).Receive(ctx, nil)
	return nil
}

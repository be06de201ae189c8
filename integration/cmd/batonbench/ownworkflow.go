package main

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// The application-owned dispatcher of the dispatch section: the shape a new user built (an announce
// activity before serving), on the supported path, dispatcher.Serve.
const (
	appWorkflow = "bench.AppDispatcher"
	appAnnounce = "bench.Announce"
	appKeyRoot  = "/bench/app-owner/"
)

// appInput is the application's own input: Baton's part, and a field of its own that must survive
// continue-as-new.
type appInput struct {
	dispatcher.Input
	Region string `json:"region"`
}

func appDispatcher(ctx workflow.Context, in appInput) error {
	return dispatcher.Serve(ctx, in.Input, dispatcher.ServeOptions{
		Start: func(ctx workflow.Context) error {
			ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
				StartToCloseTimeout: 10 * time.Second,
				RetryPolicy:         &temporal.RetryPolicy{NonRetryableErrorTypes: []string{dispatcher.ErrTypeSuperseded}},
			})
			return workflow.ExecuteActivity(ctx, appAnnounce, in).Get(ctx, nil)
		},
		Next: func(next dispatcher.Input) []any { in.Input = next; return []any{in} },
	})
}

// registerApp registers the application's dispatcher and its announce activity (a write fenced by
// the run's owner) beside Baton's dispatch activities.
func registerApp(w worker.Worker, etcd *clientv3.Client, acts *dispatcher.Activities) error {
	w.RegisterWorkflowWithOptions(appDispatcher, workflow.RegisterOptions{Name: appWorkflow})
	w.RegisterActivityWithOptions(func(ctx context.Context, in appInput) error {
		if err := dispatcher.ConfirmOwner(ctx, etcd, in.Owner); err != nil {
			return temporal.NewNonRetryableApplicationError(err.Error(), dispatcher.ErrTypeSuperseded, err)
		}
		resp, err := etcd.Txn(ctx).If(dispatcher.OwnerCmp(in.Owner)).
			Then(clientv3.OpPut(appKeyRoot+in.Owner.Queue, fmt.Sprintf("%s %d %s", in.ServerID, in.Token, in.Region))).Commit()
		switch {
		case err != nil:
			return err
		case !resp.Succeeded:
			return temporal.NewNonRetryableApplicationError("owner superseded", dispatcher.ErrTypeSuperseded, dispatcher.ErrSuperseded)
		}
		return nil
	}, activity.RegisterOptions{Name: appAnnounce})
	return dispatcher.RegisterActivities(w, acts)
}

// appTakeover is the takeover configuration of the application's dispatcher: its type, and the start
// hook that gives each run its input.
func appTakeover() takeover.Config {
	return takeover.Config{StepDown: takeover.LeaveRunning, WorkflowType: appWorkflow,
		Start: func(_ context.Context, s *takeover.Start) error {
			s.Args = []any{appInput{Input: dispatcher.Input{Owner: s.Owner}, Region: "bench-region"}}
			return nil
		}}
}

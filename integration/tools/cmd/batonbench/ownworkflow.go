package main

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/examples/shipping"
	"github.com/baton-run/baton/takeover"
)

// The application-owned dispatcher of the dispatch section is the example application's
// (examples/shipping): the shape a new user built, an announce activity before serving, on the
// supported path, dispatcher.Serve.

// registerApp registers the example's dispatcher workflow and announce activity (a write fenced by
// the run's owner) beside Baton's dispatch activities.
func registerApp(w worker.Worker, etcd *clientv3.Client, acts *dispatcher.Activities) error {
	w.RegisterWorkflowWithOptions(shipping.Dispatcher, workflow.RegisterOptions{Name: shipping.WorkflowType})
	w.RegisterActivity(&shipping.Activities{Etcd: etcd})
	return dispatcher.RegisterActivities(w, acts)
}

// appTakeover is the takeover configuration of the application's dispatcher: its type, and the start
// hook that gives each run its input, as the example's Module does.
func appTakeover() takeover.Config {
	return takeover.Config{StepDown: takeover.LeaveRunning, WorkflowType: shipping.WorkflowType,
		Start: func(_ context.Context, s *takeover.Start) error {
			s.Args = []any{shipping.Input{Input: dispatcher.Input{Owner: s.Owner}, Region: "bench-region", BatchSize: 100}}
			return nil
		}}
}

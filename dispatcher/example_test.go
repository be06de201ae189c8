package dispatcher_test

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// Every worker process runs a Temporal worker on each queue's dispatcher task queue, built with
// WorkerOptions: a crash of any of them then stalls the runs whose tasks it held for about a second.
func ExampleWorkerOptions() {
	var (
		temporal client.Client          // the application's Temporal client
		acts     *dispatcher.Activities // the ledger and the application's Handler
	)
	taskQueue := takeover.DefaultTaskQueue("billing", "orders")
	w := worker.New(temporal, taskQueue, dispatcher.WorkerOptions(worker.Options{Identity: "w1@" + taskQueue}))
	dispatcher.Register(w, acts)
	_ = w.Start()
}

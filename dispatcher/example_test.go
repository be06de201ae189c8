package dispatcher_test

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// A worker runs the reference dispatcher with a Handler that fences its own etcd write with the run's
// Owner. (integration/dispatcher runs the same contract against a real etcd.)
func ExampleOwnerCmp() {
	var (
		etcd *clientv3.Client // the application's etcd client
		w    worker.Worker    // the application's Temporal worker for the queue
	)
	handler := func(ctx context.Context, key string, req dispatcher.Request, owner takeover.Owner) error {
		resp, err := etcd.Txn(ctx).
			If(dispatcher.OwnerCmp(owner)).
			Then(clientv3.OpPut("/app/jobs/"+key, req.TaskID)).
			Commit()
		if err != nil {
			return err // retried
		}
		if !resp.Succeeded {
			return dispatcher.ErrSuperseded // not retried: the successor's run does the work
		}
		return nil
	}
	ledger, err := dispatcher.NewEtcdLedger(etcd, "", 0)
	if err != nil {
		return
	}
	_ = dispatcher.RegisterWithOptions(w, &dispatcher.Activities{Ledger: ledger, Handler: handler}, dispatcher.RegisterOptions{})
}

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

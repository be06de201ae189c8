package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/worker"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// A producer hands dispatch requests to a queue's dispatcher and returns once each is handled; the
// same request sent again is recognised by its dispatch key and not handled twice.
func ExampleProducer() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const project, queue = "billing", "example-producer"
	cluster, err := etcdx.StartCluster(etcdx.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	etcd, err := cluster.NewClient()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer etcd.Close()
	temporal, err := temporalServer.NewClient()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer temporal.Close()

	// The worker side: the reference dispatcher, whose handler does the application's work.
	dl, err := ledger.New(etcd, ledger.Config{Prefix: "/example/ledger", Retention: time.Hour})
	if err != nil {
		fmt.Println(err)
		return
	}
	w := worker.New(temporal, queue, dispatcher.WorkerOptions(worker.Options{}))
	dispatcher.Register(w, &dispatcher.Activities{Ledger: dl, History: temporal,
		Handler: func(_ context.Context, _ string, req dispatcher.Request, owner takeover.Owner) error {
			fmt.Println("handled", req.TaskID, "by", owner.ServerID)
			return nil
		}})
	if err := w.Start(); err != nil {
		fmt.Println(err)
		return
	}
	defer worker.PurgeStickyWorkflowCache()
	defer w.Stop()

	// The owner side, as a Node does it: win the queue's election, take its dispatcher over.
	el, err := election.New(etcd, election.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer el.Close(ctx)
	term, err := el.Campaign(ctx, project, queue, "node-a")
	if err != nil {
		fmt.Println(err)
		return
	}
	tm, err := takeover.New(temporal, takeover.Config{TaskQueue: queue})
	if err != nil {
		fmt.Println(err)
		return
	}
	run, err := tm.Take(ctx, term)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer temporal.TerminateWorkflow(context.WithoutCancel(ctx), run.WorkflowID, run.RunID, "example over")

	// The producer side.
	p, err := dispatcher.NewProducer(temporal, dispatcher.ProducerConfig{})
	if err != nil {
		fmt.Println(err)
		return
	}
	req := dispatcher.Request{Type: "invoice", TaskID: "task-1", PayloadSHA256: strings.Repeat("0f", 32)}
	// Dispatch returns once the request is handled; sent again, it is not handled again.
	for range 2 {
		_, err := p.Dispatch(ctx, project, queue, req)
		fmt.Println("dispatched:", err)
	}
	// Output:
	// handled task-1 by node-a
	// dispatched: <nil>
	// dispatched: <nil>
}

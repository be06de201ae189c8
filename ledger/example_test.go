package ledger_test

import (
	"context"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/worker"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// A worker runs the reference dispatcher with a Handler that fences its own etcd write with the run's
// Owner. (integration/tests/dispatcher runs the same contract against a real etcd.)
func ExampleOwnerCmp() {
	var (
		etcd *clientv3.Client // the application's etcd client
		w    worker.Worker    // the application's Temporal worker for the queue
	)
	handler := func(ctx context.Context, key string, req dispatcher.Request, owner takeover.Owner) error {
		resp, err := etcd.Txn(ctx).
			If(ledger.OwnerCmp(owner)).
			Then(clientv3.OpPut("/app/jobs/"+key, req.TaskID)).
			Commit()
		if err != nil {
			return err // retried
		}
		if !resp.Succeeded {
			return ledger.ErrSuperseded // not retried: the successor's run does the work
		}
		return nil
	}
	l, err := ledger.New(etcd, ledger.Config{})
	if err != nil {
		return
	}
	_ = dispatcher.RegisterWithOptions(w, &dispatcher.Activities{Ledger: l, Handler: handler}, dispatcher.RegisterOptions{})
}

package node_test

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/fx"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
)

// A Node in a worker process without Fx: it campaigns for its queues, takes the dispatcher over when
// it wins, and hands everything over on Stop.
func ExampleNode() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The servers: real etcd and Redis here, the package's Temporal server (TestMain).
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
	rs, err := redisx.StartServer(redisx.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rs.Close()
	rdb := rs.NewClient()
	defer rdb.Close()
	temporal, err := temporalServer.NewClient()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer temporal.Close()

	node, err := baton.New(baton.Config{Project: project(), Queues: []string{"orders"}, WaitForSession: true},
		etcd, temporal, rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := node.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for ctx.Err() == nil {
		if q, ok := leading(node, "orders"); ok {
			fmt.Println("leading:", q.Queue, "dispatcher open:", q.DispatcherOpen)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("stop:", node.Stop(ctx))
	// Output:
	// leading: orders dispatcher open: true
	// stop: <nil>
}

// Baton in an Fx application: one option, with clients built from a ClientConfig (an app with
// clients of its own provides them instead).
func ExampleModule() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := etcdx.StartCluster(etcdx.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	rs, err := redisx.StartServer(redisx.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rs.Close()

	var node *baton.Node
	app := fx.New(
		fx.NopLogger,
		fx.Supply(
			baton.Config{Project: project(), Queues: []string{"orders", "refunds"}},
			clients.Config{EtcdEndpoints: cluster.Endpoints(), TemporalAddress: temporalServer.HostPort(),
				TemporalNamespace: temporalServer.Namespace(), RedisAddr: rs.Addr(), RedisPassword: rs.Password()},
		),
		fxmodule.Clients,
		fxmodule.Module,
		fx.Populate(&node),
	)
	if err := app.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	for ctx.Err() == nil {
		_, orders := leading(node, "orders")
		_, refunds := leading(node, "refunds")
		if orders && refunds {
			fmt.Println("leading orders and refunds")
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Println("stop:", app.Stop(ctx))
	// Output:
	// leading orders and refunds
	// stop: <nil>
}

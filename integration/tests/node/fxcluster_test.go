package node_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/takeover"
)

// An app that has no Redis client of its own names a cluster's seed node in RedisClusterAddrs:
// fxmodule.NewRedisClient gives it a cluster client, and the Node leads queues whose heartbeat entries
// live on all three masters, and reconciles them all. A configuration that names a single server too
// fails the app, naming both fields.
func TestFxClientsOnRedisCluster(t *testing.T) {
	cl := redisx.StartCluster(t, redisx.ClusterOptions{Masters: 3})
	cc := redisx.ClusterClient(t, cl)
	etcd := etcdx.Start(t, etcdx.Options{})
	p := project()
	key := func(queue string) string {
		id, err := takeover.WorkflowID(p, queue)
		if err != nil {
			t.Fatal(err)
		}
		return heartbeat.Key("", p, id)
	}
	// A project's heartbeat keys share its hash tag, so they live on one master by design.
	queues := []string{"q0", "q1", "q2"}
	clientCfg := clients.Config{EtcdEndpoints: etcd.Endpoints(), TemporalAddress: temporalServer.HostPort(),
		TemporalNamespace: temporalServer.Namespace(),
		// One seed: the client learns the other masters from it.
		RedisClusterAddrs: cl.Addrs()[:1], RedisPassword: cl.ClientOptions().Password}

	var (
		node *baton.Node
		rdb  redis.UniversalClient
	)
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named("node-a")
	app := fxtest.New(t, fx.NopLogger, fx.Supply(fast(p, "node-a", queues...), clientCfg, log),
		fxmodule.Clients, fxmodule.Module, fx.Populate(&node, &rdb))
	if _, ok := rdb.(*redis.ClusterClient); !ok {
		t.Fatalf("NewRedisClient with RedisClusterAddrs gave a %T, want *redis.ClusterClient", rdb)
	}
	app.RequireStart()
	defer app.RequireStop()
	eventually(t, 60*time.Second, "the app leads every queue, heartbeats on every master and reconciles", func() error {
		for _, q := range queues {
			if qs, ok := leading(node, q); !ok || !qs.DispatcherOpen {
				return fmt.Errorf("%s: %+v", q, qs)
			}
			if n, err := cc.Exists(t.Context(), key(q)).Result(); err != nil || n != 1 {
				return fmt.Errorf("heartbeat entry of %s: %d %v", q, n, err)
			}
		}
		if last := node.Status().Reconciler.Last; last == nil || last.Active != len(queues) || last.Err != nil {
			return fmt.Errorf("reconciler %+v", node.Status().Reconciler)
		}
		return nil
	})

	both := clientCfg
	both.RedisAddr = cl.Addrs()[0]
	bad := fx.New(fx.NopLogger, fx.Supply(both), fxmodule.Clients, fx.Populate(&rdb))
	if err := bad.Err(); !errors.Is(err, clients.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), "RedisAddr must not be set with RedisClusterAddrs") {
		t.Fatalf("an app naming a server and a cluster: %v, want ErrInvalidConfig naming RedisAddr and RedisClusterAddrs", err)
	}
}

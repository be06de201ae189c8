package node_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/registry"
)

// An app whose unnamed Redis is its cache (here one nobody listens on) gives Baton its own clients
// under the name "baton", with no private module around Baton; the application's load reaches the
// registry and the status; and with WaitForSession the app reports started only once Baton holds
// an etcd session.
func TestFxAppWithItsOwnCacheNamedClientsLoadAndSession(t *testing.T) {
	e := newEnv(t)
	p := project()
	cfg := fast(p, "node-a", "orders")
	cfg.WaitForSession = true
	var completed atomic.Int64
	completed.Store(7)
	cfg.Load = func(queue string) baton.WorkerLoad {
		return baton.WorkerLoad{Active: 3, Completed: completed.Load(), Failed: 1}
	}
	cache := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = cache.Close() })
	batonEtcd := etcdx.Client(t, e.etcd)
	var node *baton.Node
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Supply(cfg, cache, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))),
		fx.Provide(
			fx.Annotate(func() redis.UniversalClient { return e.rdb }, fx.ResultTags(`name:"baton"`)),
			fx.Annotate(func() *clientv3.Client { return batonEtcd }, fx.ResultTags(`name:"baton"`)),
			fx.Annotate(func() client.Client { return e.tc }, fx.ResultTags(`name:"baton"`)),
		),
		fxmodule.Module,
		fx.Populate(&node),
	)
	app.RequireStart()
	defer app.RequireStop()
	if st := node.Status(); st.SessionValidUntil.IsZero() {
		t.Fatalf("started without an etcd session (WaitForSession): %+v", st)
	}
	var qs baton.QueueStatus
	eventually(t, 20*time.Second, "node-a leads orders and heartbeats in Baton's Redis", func() error {
		var ok bool
		if qs, ok = leading(node, "orders"); !ok {
			return fmt.Errorf("status %+v", node.Status())
		}
		if n, _ := e.rdb.Exists(t.Context(), heartbeat.Key("", node.Config().Project, qs.WorkflowID)).Result(); n != 1 {
			return errors.New("no heartbeat entry in Baton's Redis")
		}
		return nil
	})
	reg, err := registry.New(e.rdb, registry.Config{Project: p})
	if err != nil {
		t.Fatal(err)
	}
	completed.Store(12)
	eventually(t, 20*time.Second, "the registry shows the worker's load", func() error {
		w, err := reg.Get(t.Context(), "orders", "node-a")
		if err != nil {
			return err
		}
		if w.Active != 3 || w.TotalCompleted != 12 || w.TotalFailed != 1 {
			return fmt.Errorf("registry: active %d, completed %d, failed %d", w.Active, w.TotalCompleted, w.TotalFailed)
		}
		if l := node.Status().Worker.Load["orders"]; l.Completed != 12 || l.Active != 3 {
			return fmt.Errorf("status load %+v", l)
		}
		return nil
	})
}

// WaitForSession is bounded by the start timeout: with etcd unreachable the app fails to start,
// with every loop of the Node stopped (the goroutine check of TestMain holds that).
func TestFxStartWaitingForASessionFailsWithinTheStartTimeout(t *testing.T) {
	e := newEnv(t)
	cfg := fast(project(), "node-a", "orders")
	cfg.WaitForSession = true
	cc := e.cc
	cc.EtcdEndpoints = []string{"127.0.0.1:1"}
	app := fx.New(fx.NopLogger, fx.Supply(cfg, cc), fxmodule.Clients, fxmodule.Module,
		fx.StartTimeout(time.Second))
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	err := app.Start(ctx)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start = %v, want it to fail when no session came within the start timeout", err)
	}
	_ = app.Stop(context.WithoutCancel(t.Context()))
}

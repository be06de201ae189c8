package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// Readiness follows etcd reachability: a node cut off from etcd turns unready (and stops leading)
// before its lease could expire, liveness stays green (a restart would not bring etcd back), and both
// recover when the connection heals.
func TestHealthFollowsEtcd(t *testing.T) {
	e := newEnv(t)
	proxy := etcdx.NewTestProxy(t, e.etcd.Endpoints()[0])
	cli := etcdx.Client(t, e.etcd, proxy.URL())
	cfg := fast(project(), "node-a", "orders")
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel))
	node, err := baton.New(cfg, cli, e.tc, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Ready(); !errors.Is(err, baton.ErrNotStarted) {
		t.Fatalf("Ready before Start = %v", err)
	}
	if err := node.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.Heal()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 20*time.Second)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	eventually(t, 20*time.Second, "ready and leading", func() error {
		if _, ok := leading(node, "orders"); !ok {
			return errors.New("not leading")
		}
		return node.Ready()
	})
	if err := node.Live(); err != nil {
		t.Fatalf("Live while leading = %v", err)
	}

	proxy.Blackhole()
	eventually(t, 10*time.Second, "unready once etcd is unreachable", func() error {
		if err := node.Ready(); !errors.Is(err, baton.ErrNoSession) {
			return errors.New("still ready")
		}
		return nil
	})
	if qs, ok := leading(node, "orders"); ok {
		t.Fatalf("still leading without etcd: %+v", qs)
	}
	if err := node.Live(); err != nil {
		t.Fatalf("Live without etcd = %v; liveness must not fail for an outage a restart cannot fix", err)
	}
	proxy.Heal()
	eventually(t, 20*time.Second, "ready and leading again", func() error {
		if _, ok := leading(node, "orders"); !ok {
			return errors.New("not leading")
		}
		return node.Ready()
	})
}

package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// startCuttableNode is startNode with its etcd client behind a proxy of its own, which the test cuts
// to make the node crash as far as etcd can tell (its Temporal and Redis clients go on).
func (e *env) startCuttableNode(t *testing.T, cfg baton.Config) (*baton.Node, *etcdx.Proxy) {
	t.Helper()
	proxy := etcdx.NewTestProxy(t, e.etcd.Endpoints()[0])
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(cfg.ServerID)
	node, err := baton.New(cfg, etcdx.Client(t, e.etcd, proxy.URL()), e.tc, e.rdb)
	if err != nil {
		t.Fatal(err)
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
	return node, proxy
}

// The whole Node runs on Redis Cluster, with its queues' heartbeat entries on three masters: it leads,
// heartbeats, registers workers and reconciles; a graceful stop hands every queue over to a second
// Node; and when that Node crashes (cut off from etcd, its runs and entries left behind), a third
// Node's reconciler -- it campaigns for another queue only, so nothing but the reconciler can act on
// them -- terminates the crashed owner's runs and deletes its entries on every master.
func TestNodesOnRedisCluster(t *testing.T) {
	cl := redisx.StartCluster(t, redisx.ClusterOptions{Masters: 3})
	cc := redisx.ClusterClient(t, cl)
	e := &env{etcd: etcdx.Start(t, etcdx.Options{}), rdb: cc, tc: temporalx.Client(t, temporalServer)}
	p := project()
	name := func(i int) string { return fmt.Sprintf("q%d", i) }
	key := func(queue string) string {
		id, err := takeover.WorkflowID(p, queue)
		if err != nil {
			t.Fatal(err)
		}
		return heartbeat.Key("", p, id)
	}
	// A project's heartbeat keys share its hash tag ({<project>}), so they live on one master by design.
	queues := []string{name(0), name(1), name(2)}
	leadsAll := func(node *baton.Node) (map[string]baton.QueueStatus, error) {
		all := map[string]baton.QueueStatus{}
		for _, q := range queues {
			qs, ok := leading(node, q)
			if !ok || !qs.DispatcherOpen {
				return nil, fmt.Errorf("%s: %+v", q, qs)
			}
			all[q] = qs
		}
		return all, nil
	}

	a := e.startNode(t, fast(p, "node-a", queues...), e.tc)
	var byA map[string]baton.QueueStatus
	eventually(t, 60*time.Second, "node-a leads every queue, heartbeats, registers and reconciles", func() error {
		var err error
		if byA, err = leadsAll(a); err != nil {
			return err
		}
		st := a.Status()
		for _, q := range queues {
			if st.Worker.Status[q] != registry.StatusOnline {
				return fmt.Errorf("worker status %+v", st.Worker)
			}
			if n, err := e.rdb.Exists(t.Context(), key(q)).Result(); err != nil || n != 1 {
				return fmt.Errorf("heartbeat entry of %s: %d %v", q, n, err)
			}
		}
		// Three active entries: the reconciler read all three masters.
		if last := st.Reconciler.Last; last == nil || last.Active != len(queues) || last.Err != nil {
			return fmt.Errorf("reconciler %+v", st.Reconciler)
		}
		return nil
	})

	b, proxy := e.startCuttableNode(t, fast(p, "node-b", queues...))
	eventually(t, 30*time.Second, "the leader counts both workers", func() error {
		for _, q := range queues {
			if qs, _ := leading(a, q); qs.Workers[registry.StatusOnline] != 2 {
				return fmt.Errorf("%s: workers %v", q, qs.Workers)
			}
		}
		return nil
	})
	stopCtx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := a.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}
	var byB map[string]baton.QueueStatus
	eventually(t, 60*time.Second, "node-b takes every queue over", func() error {
		var err error
		byB, err = leadsAll(b)
		return err
	})
	for _, q := range queues {
		qa, qb := byA[q], byB[q]
		if qb.Token <= qa.Token || qb.RunID == qa.RunID {
			t.Fatalf("%s: successor token %d run %s, predecessor token %d run %s", q, qb.Token, qb.RunID, qa.Token, qa.RunID)
		}
		if st := e.status(t, qa.WorkflowID, qa.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			t.Fatalf("%s: predecessor's run %v, want TERMINATED by its own step-down", q, st)
		}
	}
	eventually(t, 30*time.Second, "the entries name node-b's runs", func() error {
		for _, q := range queues {
			if v, _ := e.rdb.HGet(t.Context(), key(q), heartbeat.FieldRunID).Result(); v != byB[q].RunID {
				return fmt.Errorf("%s: entry names %q", q, v)
			}
		}
		return nil
	})
	if w, err := b.Registry().Get(t.Context(), queues[0], "node-a"); err != nil || w.Status != registry.StatusOffline {
		t.Fatalf("node-a after stop: %+v %v, want OFFLINE", w, err)
	}

	c := e.startNode(t, fast(p, "node-c", "other"), e.tc)
	eventually(t, 60*time.Second, "node-c leads its own queue", func() error {
		if _, ok := leading(c, "other"); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	proxy.Blackhole()
	eventually(t, 90*time.Second, "the crashed owner's runs terminated and entries deleted on every master", func() error {
		for _, q := range queues {
			if n, err := e.rdb.Exists(t.Context(), key(q)).Result(); err != nil || n != 0 {
				return fmt.Errorf("entry of %s: %d %v", q, n, err)
			}
			if st := e.status(t, byB[q].WorkflowID, byB[q].RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
				return fmt.Errorf("%s: run %v", q, st)
			}
		}
		return nil
	})
	for _, q := range queues {
		if _, ok := leading(b, q); ok {
			t.Fatalf("node-b still leads %s without etcd", q)
		}
	}
	t.Logf("node-c's reconciler: %+v", c.Status().Reconciler)
}

package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/integration/tests/testkit"

	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

var temporalServer *temporalx.Server

func TestMain(m *testing.M) { testkit.TemporalMain(m, temporalx.Options{}, &temporalServer) }

type env struct {
	etcd  *etcdx.Cluster
	redis *redisx.Server
	rdb   redis.UniversalClient
	tc    client.Client
	cc    clients.Config
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{etcd: etcdx.Start(t, etcdx.Options{}), redis: redisx.Start(t, redisx.Options{})}
	e.rdb = redisx.Client(t, e.redis)
	e.tc = temporalx.Client(t, temporalServer)
	e.cc = clients.Config{EtcdEndpoints: e.etcd.Endpoints(), TemporalAddress: temporalServer.HostPort(),
		TemporalNamespace: temporalServer.Namespace(), RedisAddr: e.redis.Addr(), RedisPassword: e.redis.Password()}
	return e
}

func project() string { return fmt.Sprintf("p%d", time.Now().UnixNano()%1e12) }

// fast is a Config with compressed intervals for tests.
func fast(project, id string, queues ...string) baton.Config {
	return baton.Config{
		Project: project, Queues: queues, ServerID: id,
		Election:   election.Config{TTL: 2 * time.Second},
		Heartbeat:  heartbeat.Config{Interval: 200 * time.Millisecond},
		Registry:   registry.Config{HeartbeatInterval: 200 * time.Millisecond},
		Reconciler: reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: time.Second},
		// These tests run no dispatcher worker, so no run ever makes progress: that is judged by the
		// progress tests, which run one.
		Progress: progress.Config{Disabled: true},
	}
}

// app is one worker process built the way applications build it: Fx, fxmodule.Clients, fxmodule.Module.
func (e *env) app(t *testing.T, cfg baton.Config) (*fxtest.App, *baton.Node) {
	t.Helper()
	var node *baton.Node
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(cfg.ServerID)
	app := fxtest.New(t,
		fx.NopLogger,
		fx.Supply(cfg, e.cc, log),
		fxmodule.Clients,
		fxmodule.Module,
		fx.Populate(&node),
	)
	return app, node
}

func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	harness.Eventually(t, d, what, f)
}

func leading(n *baton.Node, queue string) (baton.QueueStatus, bool) {
	for _, q := range n.Status().Queues {
		if q.Queue == queue {
			return q, q.Leading && q.RunID != ""
		}
	}
	return baton.QueueStatus{}, false
}

func (e *env) status(t *testing.T, id, runID string) enumspb.WorkflowExecutionStatus {
	t.Helper()
	resp, err := e.tc.DescribeWorkflowExecution(t.Context(), id, runID)
	if err != nil {
		t.Fatalf("describe %s/%s: %v", id, runID, err)
	}
	return resp.GetWorkflowExecutionInfo().GetStatus()
}

// The Fx app starts the Node (it leads, runs the dispatcher, heartbeats, registers, reconciles),
// and stopping the app hands over: the run is terminated by its owner, the heartbeat entry cleared,
// the worker deregistered, and a second app takes over.
func TestFxAppStartsLeadsAndHandsOver(t *testing.T) {
	e := newEnv(t)
	p := project()
	appA, nodeA := e.app(t, fast(p, "node-a", "orders"))
	appA.RequireStart()
	var qa baton.QueueStatus
	eventually(t, 20*time.Second, "node-a leads with a dispatcher run", func() error {
		var ok bool
		if qa, ok = leading(nodeA, "orders"); !ok {
			return fmt.Errorf("status %+v", nodeA.Status())
		}
		return nil
	})
	if err := nodeA.Ready(); err != nil {
		t.Fatalf("ready: %v", err)
	}
	if st := e.status(t, qa.WorkflowID, qa.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("dispatcher run %v", st)
	}
	hbKey := heartbeat.Key("", p, qa.WorkflowID)
	eventually(t, 10*time.Second, "heartbeat, registration and a reconcile cycle", func() error {
		if n, _ := e.rdb.Exists(t.Context(), hbKey).Result(); n != 1 {
			return errors.New("no heartbeat entry")
		}
		st := nodeA.Status()
		if st.Worker.Status["orders"] != registry.StatusOnline {
			return fmt.Errorf("worker status %+v", st.Worker)
		}
		if st.Reconciler.Last == nil || st.Reconciler.Last.Active != 1 {
			return fmt.Errorf("reconciler %+v", st.Reconciler)
		}
		return nil
	})

	appB, nodeB := e.app(t, fast(p, "node-b", "orders"))
	appB.RequireStart()
	eventually(t, 10*time.Second, "the leader counts both workers", func() error {
		q, _ := leading(nodeA, "orders")
		if q.Workers[registry.StatusOnline] != 2 {
			return fmt.Errorf("workers %v", q.Workers)
		}
		return nil
	})
	if _, ok := leading(nodeB, "orders"); ok {
		t.Fatal("node-b leads while node-a does")
	}
	stopped := time.Now()
	appA.RequireStop()
	var qb baton.QueueStatus
	eventually(t, 10*time.Second, "node-b takes over", func() error {
		var ok bool
		if qb, ok = leading(nodeB, "orders"); !ok {
			return errors.New("not yet")
		}
		return nil
	})
	t.Logf("graceful handover through Fx: %v from Stop to the successor's run open", time.Since(stopped).Round(time.Millisecond))
	if qb.Token <= qa.Token || qb.RunID == qa.RunID {
		t.Fatalf("successor token %d run %s, predecessor token %d run %s", qb.Token, qb.RunID, qa.Token, qa.RunID)
	}
	if st := e.status(t, qa.WorkflowID, qa.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("predecessor's run %v, want TERMINATED by its own step-down", st)
	}
	if err := nodeA.Ready(); !errors.Is(err, baton.ErrNotStarted) {
		t.Fatalf("stopped node ready: %v", err)
	}
	w, err := nodeB.Registry().Get(t.Context(), "orders", "node-a")
	if err != nil || w.Status != registry.StatusOffline {
		t.Fatalf("node-a after stop: %+v %v, want OFFLINE", w, err)
	}
	eventually(t, 10*time.Second, "successor's heartbeat", func() error {
		v, _ := e.rdb.HGet(t.Context(), hbKey, heartbeat.FieldRunID).Result()
		if v != qb.RunID {
			return fmt.Errorf("entry names %q", v)
		}
		return nil
	})
	appB.RequireStop()
	// The last owner's stop ended its run and cleared its entry, once its term had ended, before
	// Stop returned: nothing is left for the reconciler.
	if n, err := e.rdb.Exists(t.Context(), hbKey).Result(); err != nil || n != 0 {
		t.Fatalf("heartbeat entry after the last owner's stop: %d %v, want none", n, err)
	}
}

// A failing start surfaces a clear error: invalid Baton config, invalid client config.
func TestFxFailingStartIsClear(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name string
		cfg  baton.Config
		cc   clients.Config
		want string
	}{
		{"no queues", baton.Config{Project: "p"}, e.cc, "baton: invalid config: Queues must name at least one queue"},
		{"bad queue", baton.Config{Project: "p", Queues: []string{"a b"}}, e.cc, "Queues[0]"},
		{"no etcd endpoints", baton.Config{Project: "p", Queues: []string{"q"}}, clients.Config{}, "EtcdEndpoints must name at least one endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := fx.New(fx.NopLogger, fx.Supply(tc.cfg, tc.cc), fxmodule.Clients, fxmodule.Module)
			err := app.Err()
			if err == nil {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				err = app.Start(ctx)
				_ = app.Stop(ctx)
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("start error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// A rolling restart of 3 Fx apps over 4 queues, 3 rounds: every queue always has at most one leader
// among the nodes, every queue is led again after each restart, and each queue keeps exactly one
// open dispatcher run.
func TestRollingRestartOfApps(t *testing.T) {
	e := newEnv(t)
	p := project()
	queues := []string{"q1", "q2", "q3", "q4"}
	type proc struct {
		app  *fxtest.App
		node *baton.Node
	}
	start := func(i, gen int) proc {
		app, node := e.app(t, fast(p, fmt.Sprintf("node-%d-%d", i, gen), queues...))
		app.RequireStart()
		return proc{app, node}
	}
	procs := []proc{start(0, 0), start(1, 0), start(2, 0)}
	check := func() error {
		for _, q := range queues {
			leaders := 0
			for _, pr := range procs {
				if qs, _ := leading(pr.node, q); qs.Leading {
					leaders++
				}
			}
			if leaders > 1 {
				t.Fatalf("queue %s has %d leaders", q, leaders)
			}
			if leaders == 0 {
				return fmt.Errorf("queue %s has no leader", q)
			}
			if _, ok := func() (baton.QueueStatus, bool) {
				for _, pr := range procs {
					if qs, ok := leading(pr.node, q); ok {
						return qs, true
					}
				}
				return baton.QueueStatus{}, false
			}(); !ok {
				return fmt.Errorf("queue %s has no dispatcher run yet", q)
			}
		}
		return nil
	}
	eventually(t, 30*time.Second, "all queues led", check)
	for round := 1; round <= 3; round++ {
		for i := range procs {
			procs[i].app.RequireStop()
			procs[i] = start(i, round)
			eventually(t, 30*time.Second, fmt.Sprintf("round %d node %d: all queues led", round, i), check)
		}
	}
	for _, q := range queues {
		id, _ := takeover.WorkflowID(p, q)
		// Visibility lags a little behind terminations: wait for it to settle on one open run.
		eventually(t, 10*time.Second, "one open dispatcher run for "+q, func() error {
			resp, err := e.tc.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
				Query: fmt.Sprintf("WorkflowId = '%s' AND ExecutionStatus = 'Running'", id)})
			if err != nil {
				return err
			}
			if n := len(resp.GetExecutions()); n != 1 {
				return fmt.Errorf("%d open runs", n)
			}
			return nil
		})
	}
	for _, pr := range procs {
		pr.app.RequireStop()
	}
}

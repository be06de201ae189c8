package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// Redis is not the only source of truth: after FLUSHALL (or a restart without persistence, a failover
// to a lagging replica, an entry past its TTL) a crashed owner's run has no heartbeat entry, and the
// sweep of Temporal's open runs still ends it because its queue has no leader. A run of a queue that
// has a live leader at its token is left alone.
func TestOrphanWithoutHeartbeatEntryIsTerminated(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
	orphan, key := a.abandon(t, p, "orders")
	_, live, _ := a.lead(t, p, "payments")
	if err := e.rdb.Del(t.Context(), key).Err(); err != nil { // what FLUSHALL does to this project
		t.Fatal(err)
	}
	rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond}, nil, nil)
	eventually(t, 30*time.Second, "the orphan terminated and counted", func() error {
		if st := e.status(t, orphan.WorkflowID, orphan.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return fmt.Errorf("orphan is %v", st)
		}
		// A cycle's report is recorded after its sweep, a moment after the terminate it did.
		orphans := 0
		for _, r := range rn.reports() {
			orphans += r.Orphans
		}
		if orphans != 1 {
			return fmt.Errorf("the sweep counted %d orphans, want 1", orphans)
		}
		return nil
	})
	if st := e.status(t, live.WorkflowID, live.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("the live leader's run is %v", st)
	}
}

// A reconciler leader cut off from Redis resigns after a bounded number of failed cycles, so that a
// healthy candidate takes over and cleans up; it does not stand again while Redis does not answer it.
func TestReconcilerCutOffFromRedisHandsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	proxy := etcdx.NewTestProxy(t, e.redis.Addr())
	opts := e.redis.ClientOptions()
	opts.Addr = proxy.Addr()
	opts.MaxRetries = -1
	cut := redis.NewClient(opts)
	t.Cleanup(func() { _ = cut.Close() })
	cfg := reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond, CallTimeout: time.Second}
	sick := e.reconcilerOn(t, cut, "rec-sick", p, cfg, nil, nil)
	eventually(t, 30*time.Second, "rec-sick leads and cycles", func() error {
		for _, r := range sick.reports() {
			if r.Err == nil {
				return nil
			}
		}
		return errors.New("no successful cycle yet")
	})
	healthy := e.reconciler(t, "rec-healthy", p, cfg, nil, nil)
	proxy.Blackhole()
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
	run, key := a.abandon(t, p, "orders")
	eventually(t, 60*time.Second, "the healthy candidate cleans up", func() error {
		if e.exists(t, key) {
			return errors.New("key still exists")
		}
		if st := e.status(t, run.WorkflowID, run.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return fmt.Errorf("run is %v", st)
		}
		// A cycle's report is recorded after its sweep, a moment after the cleanup it did.
		for _, r := range healthy.reports() {
			if r.Err == nil {
				return nil
			}
		}
		return errors.New("the healthy candidate has not reported a successful cycle yet")
	})
	failedInARow := 0
	for _, r := range sick.reports() {
		if r.Err == nil {
			failedInARow = 0
			continue
		}
		if failedInARow++; failedInARow > 3 {
			t.Fatalf("rec-sick ran %d failing cycles in a row without resigning", failedInARow)
		}
	}
}

// The sweep decides every open run it lists from one etcd read of the project's queue leaders: the
// leader lookups of a cycle do not grow with the number of open runs (one per run would be 13 or 14
// reads below). Live leaders' runs are left alone; runs whose owner resigned are terminated; runs whose
// owner cannot be decided are left alone and counted.
func TestSweepReadsLeadersOncePerCycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{})
	// The reconciler's queue Elector on a client of its own whose range requests are counted.
	var ranges atomic.Int64
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				if method == "/etcdserverpb.KV/Range" {
					ranges.Add(1)
				}
				return invoker(ctx, method, req, reply, cc, opts...)
			})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named("rec-1")
	qel, err := election.New(cli, election.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeElector(t, qel) })
	recEl, err := election.New(e.ecli, election.Config{Prefix: reconciler.DefaultElectionPrefix, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeElector(t, recEl) })
	term, err := recEl.Campaign(t.Context(), p, reconciler.ElectionQueue, "rec-1")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := reconciler.New(reconciler.Config{Project: p, ServerID: "rec-1", Prefix: e.pfx, Logger: log}, e.rdb, e.tc, qel)
	if err != nil {
		t.Fatal(err)
	}

	// take starts a dispatcher run of queue by node-a's takeover, without heartbeats; with resign the
	// term ends at once and leaves the run behind.
	take := func(queue string, resign bool) takeover.Run {
		qt, err := a.el.Campaign(t.Context(), p, queue, a.id)
		if err != nil {
			t.Fatal(err)
		}
		run, err := a.mgr.Take(t.Context(), qt)
		if err != nil {
			t.Fatal(err)
		}
		if resign {
			if err := qt.Resign(t.Context()); err != nil {
				t.Fatal(err)
			}
		}
		return run
	}
	var live, orphans []takeover.Run
	// cycles runs cycles until one lists want open runs, and checks that no cycle read the leaders more
	// than once.
	cycles := func(want int) {
		t.Helper()
		eventually(t, 30*time.Second, fmt.Sprintf("a cycle that lists %d open runs", want), func() error {
			ranges.Store(0)
			rep, err := rec.Cycle(t.Context(), term)
			if err != nil {
				t.Fatalf("cycle: %v", err)
			}
			if n := ranges.Load(); n > 1 {
				t.Fatalf("a cycle over %d open runs read the queue leaders %d times, want once", rep.Open, n)
			}
			if rep.Open < want {
				return fmt.Errorf("the cycle listed %d open runs (visibility lags)", rep.Open)
			}
			return nil
		})
	}

	for i := range 2 {
		live = append(live, take(fmt.Sprintf("live%02d", i), false))
	}
	orphans = append(orphans, take("gone0", true))
	// Runs whose owner cannot be decided are left alone and counted: one without an owner memo, and
	// one whose memo carries a newer token than its queue's leader (etcd's revisions went back).
	start := func(queue string, memo map[string]any) takeover.Run {
		id, err := takeover.WorkflowID(p, queue)
		if err != nil {
			t.Fatal(err)
		}
		r, err := e.tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: p + "-nobody-polls", Memo: memo},
			takeover.DefaultWorkflowType)
		if err != nil {
			t.Fatal(err)
		}
		return takeover.Run{WorkflowID: id, RunID: r.GetRunID()}
	}
	futureTerm, err := a.el.Campaign(t.Context(), p, "future", a.id)
	if err != nil {
		t.Fatal(err)
	}
	undecided := []takeover.Run{
		start("nomemo", nil),
		start("future", map[string]any{takeover.MemoKey: takeover.Owner{Project: p, Queue: "future", ServerID: "restored",
			Token: futureTerm.Token() + 1000, ElectionKey: futureTerm.Key()}}),
	}
	// The live runs and "future" (the orphan may be ended and unlisted by then).
	cycles(3)
	eventually(t, 30*time.Second, "a cycle counts both undecided runs", func() error {
		rep, err := rec.Cycle(t.Context(), term)
		if err != nil {
			t.Fatalf("cycle: %v", err)
		}
		if rep.Undecided != 2 {
			return fmt.Errorf("undecided %d, want 2", rep.Undecided)
		}
		return nil
	})
	for i := 2; i < 12; i++ {
		live = append(live, take(fmt.Sprintf("live%02d", i), false))
	}
	orphans = append(orphans, take("gone1", true))
	cycles(13)

	for _, run := range orphans {
		eventually(t, 30*time.Second, "the orphan is terminated", func() error {
			if st := e.status(t, run.WorkflowID, run.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
				if _, err := rec.Cycle(t.Context(), term); err != nil {
					t.Fatalf("cycle: %v", err)
				}
				return fmt.Errorf("orphan %s is %v", run.WorkflowID, st)
			}
			return nil
		})
	}
	for _, run := range append(live, undecided...) {
		if st := e.status(t, run.WorkflowID, run.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("run %s, a live leader's or undecided, is %v", run.WorkflowID, st)
		}
	}
}

// A reconciler leader cut off from Temporal (its Redis and etcd fine) fails every sweep, resigns after
// a bounded number of failed cycles, and a healthy candidate takes over and cleans up.
func TestReconcilerCutOffFromTemporalHandsOver(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	proxy := etcdx.NewTestProxy(t, temporalServer.HostPort())
	cut, err := temporalServer.NewClient(func(o *client.Options) { o.HostPort = proxy.Addr() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cut.Close)
	cfg := reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond, CallTimeout: time.Second}
	sick := e.reconciler(t, "rec-sick", p, cfg, cut, nil)
	eventually(t, 30*time.Second, "rec-sick leads and cycles", func() error {
		for _, r := range sick.reports() {
			if r.Err == nil {
				return nil
			}
		}
		return errors.New("no successful cycle yet")
	})
	healthy := e.reconciler(t, "rec-healthy", p, cfg, nil, nil)
	proxy.Blackhole()
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
	run, key := a.abandon(t, p, "orders")
	eventually(t, 60*time.Second, "the healthy candidate cleans up", func() error {
		if e.exists(t, key) {
			return errors.New("key still exists")
		}
		if st := e.status(t, run.WorkflowID, run.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return fmt.Errorf("run is %v", st)
		}
		for _, r := range healthy.reports() {
			if r.Err == nil {
				return nil
			}
		}
		return errors.New("the healthy candidate has not reported a successful cycle yet")
	})
	failedInARow := 0
	for _, r := range sick.reports() {
		if r.Err == nil {
			failedInARow = 0
			continue
		}
		if failedInARow++; failedInARow > 3 {
			t.Fatalf("rec-sick ran %d failing cycles in a row without resigning", failedInARow)
		}
	}
}

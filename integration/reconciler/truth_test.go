package reconciler_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/reconciler"
)

// Redis is not the only source of truth: after FLUSHALL (or a restart without persistence, a failover
// to a lagging replica, an entry past its TTL) a crashed owner's run has no heartbeat entry, and the
// sweep of Temporal's open runs still ends it because its queue has no leader. A run of a queue that
// has a live leader at its token is left alone.
func TestOrphanWithoutHeartbeatEntryIsTerminated(t *testing.T) {
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
	e := newEnv(t)
	p := project(t)
	proxy := etcdtest.NewTestProxy(t, e.redis.Addr())
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

package node_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// orphanCount sums the reconciler's orphan counter of one process.
func orphanCount(t *testing.T, reader metric.Reader) int {
	return counterSum(t, reader, reconciler.MetricOrphans)
}

// reconcilerLeader starts a node that serves queue only (at the cycle's production pace, then as tune
// says) and waits
// until it leads the project's reconciler, and returns it with its metrics.
func (e *env) reconcilerLeader(t *testing.T, p, id, queue string, tune ...func(*baton.Config)) (*baton.Node, metric.Reader) {
	t.Helper()
	reader := metric.NewManualReader()
	cfg := slowCycle(fast(p, id, queue))
	for _, f := range tune {
		f(&cfg)
	}
	cfg.MeterProvider = metric.NewMeterProvider(metric.WithReader(reader))
	n := e.startNode(t, cfg, e.tc)
	eventually(t, 30*time.Second, id+" leads the reconciler", func() error {
		if n.Status().Reconciler.Cycles == 0 {
			return fmt.Errorf("no cycle yet")
		}
		return nil
	})
	return n, reader
}

// waitVacant waits until etcd shows no candidate for queue: its last worker's key is gone.
func (e *env) waitVacant(t *testing.T, p, queue string) {
	t.Helper()
	el, err := election.New(etcdx.Client(t, e.etcd), election.Config{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, queue+" without a candidate", func() error {
		if _, err := el.Leader(t.Context(), p, queue); !errors.Is(err, election.ErrNoLeader) {
			return fmt.Errorf("%s's leader: %v", queue, err)
		}
		return nil
	})
}

// slowCycle is fast() with the reconciler's cycle at its production pace: only the event-driven path
// can clean up within seconds.
func slowCycle(cfg baton.Config) baton.Config {
	cfg.Reconciler.Interval, cfg.Reconciler.StaleAfter = time.Minute, 30*time.Second
	return cfg
}

// The reconciler leader (a worker that serves another queue only) cleans up after a crashed owner
// with no successor as soon as the owner's key expired and its queue stayed without a candidate for
// the orphan grace, not at the next one-minute cycle: the run is terminated by its run ID and the
// heartbeat entry deleted.
func TestOrphanOfACrashedOwnerIsCleanedUpWithinTheGrace(t *testing.T) {
	e := newEnv(t)
	p := project()
	_, reader := e.reconcilerLeader(t, p, "node-b", "other")
	a, proxy := e.startCuttableNode(t, slowCycle(fast(p, "node-a", "solo")))
	qa := e.ownedRun(t, a, "solo", "node-a leads solo with its run", nil)
	key := heartbeat.Key("", p, qa.WorkflowID)

	// node-a crashes as far as etcd can tell: cut off, its lease runs out.
	crashed := time.Now()
	proxy.Blackhole()
	var closedAt time.Time
	eventually(t, 30*time.Second, "node-a's run is terminated", func() error {
		if st := e.status(t, qa.WorkflowID, qa.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return fmt.Errorf("node-a's run is %v", st)
		}
		closedAt = time.Now()
		return nil
	})
	ttl := 2 * time.Second // fast()'s election TTL
	took := closedAt.Sub(crashed)
	t.Logf("crash -> run terminated: %v (TTL %v + grace %v)", took.Round(time.Millisecond), ttl, reconciler.DefaultOrphanGrace)
	if took > ttl+reconciler.DefaultOrphanGrace+20*time.Second {
		t.Errorf("cleanup took %v: not the event-driven path", took)
	}
	eventually(t, 10*time.Second, "node-a's heartbeat entry is deleted", func() error {
		if n, err := e.rdb.Exists(t.Context(), key).Result(); err != nil || n != 0 {
			return fmt.Errorf("entry %s still there (%v)", key, err)
		}
		return nil
	})
	if n := orphanCount(t, reader); n != 1 {
		t.Errorf("%s = %d, want 1", reconciler.MetricOrphans, n)
	}
}

// A queue vacated before the reconciler's term began is cleaned up the orphan grace after that term's
// start, not a cycle later: the whole fleet (node-a, which led solo and the reconciler) crashes, and
// the worker that comes back first (node-b) does not serve solo. node-b's vacancy watch starts with
// its term, after solo's key went, so before, solo's run waited for the cycle (a minute here) to
// find its entry stale.
func TestOrphanVacatedBeforeTheReconcilersTermIsCleanedUp(t *testing.T) {
	e := newEnv(t)
	p := project()
	a, proxy := e.startCuttableNode(t, slowCycle(fast(p, "node-a", "solo")))
	qa := e.ownedRun(t, a, "solo", "node-a leads solo with its run", nil)
	eventually(t, 30*time.Second, "node-a leads the reconciler", func() error {
		if a.Status().Reconciler.Cycles == 0 {
			return fmt.Errorf("no cycle yet")
		}
		return nil
	})

	// node-a crashes as far as etcd can tell, and solo stays without a candidate.
	proxy.Blackhole()
	e.waitVacant(t, p, "solo")

	began := time.Now()
	_, reader := e.reconcilerLeader(t, p, "node-b", "other")
	eventually(t, 2*time.Minute, "node-a's run is terminated", func() error {
		if st := e.status(t, qa.WorkflowID, qa.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return fmt.Errorf("node-a's run is %v", st)
		}
		return nil
	})
	took := time.Since(began)
	t.Logf("node-b started -> solo's run terminated: %v (grace %v, cycle %v)", took.Round(time.Millisecond),
		reconciler.DefaultOrphanGrace, slowCycle(baton.Config{}).Reconciler.Interval)
	// Counted once the cleanup is over (the entry deleted after the run).
	eventually(t, 10*time.Second, "the cleanup counted as the orphan path's", func() error {
		if n := orphanCount(t, reader); n != 1 {
			return fmt.Errorf("%s = %d, want 1: not the orphan path's (the cycle's?), %v after node-b started",
				reconciler.MetricOrphans, n, took.Round(time.Millisecond))
		}
		return nil
	})
}

// A vacancy outlives a change of reconciler leader: node-a, solo's only worker, crashes as far as
// etcd can tell; node-b takes the reconciler over and stops gracefully within the orphan grace, before
// it cleaned up; node-c, which never saw solo's candidate go, takes the reconciler over and finds the
// vacancy at the start of its own term, and ends solo's run through the orphan path, not a minute
// later with its cycle.
func TestOrphanCleanedUpAcrossAReconcilerChange(t *testing.T) {
	e := newEnv(t)
	p := project()
	a, proxy := e.startCuttableNode(t, slowCycle(fast(p, "node-a", "solo")))
	qa := e.ownedRun(t, a, "solo", "node-a leads solo with its run", nil)
	proxy.Blackhole()
	e.waitVacant(t, p, "solo")
	// node-b's grace is long, so that it stops before it would clean up, however slow the machine.
	b, readerB := e.reconcilerLeader(t, p, "node-b", "other", func(c *baton.Config) { c.Reconciler.OrphanGrace = time.Minute })
	if err := b.Stop(t.Context()); err != nil {
		t.Fatal(err)
	}
	if st := e.status(t, qa.WorkflowID, qa.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("solo's run is %v before node-c started", st)
	}
	began := time.Now()
	_, readerC := e.reconcilerLeader(t, p, "node-c", "other")
	eventually(t, 2*time.Minute, "node-a's run is terminated", func() error {
		if st := e.status(t, qa.WorkflowID, qa.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return fmt.Errorf("node-a's run is %v", st)
		}
		return nil
	})
	t.Logf("node-c started -> solo's run terminated: %v (grace %v)", time.Since(began).Round(time.Millisecond), reconciler.DefaultOrphanGrace)
	eventually(t, 10*time.Second, "the cleanup counted as node-c's orphan path's", func() error {
		if b, c := orphanCount(t, readerB), orphanCount(t, readerC); b != 0 || c != 1 {
			return fmt.Errorf("%s: node-b %d, node-c %d; want 0 and 1", reconciler.MetricOrphans, b, c)
		}
		return nil
	})
}

// Neither a handover nor a queue's owner coming back within the grace triggers the orphan cleanup:
// a graceful stop hands the queue to a worker in line, and a crash of a queue's leader with another
// worker serving it is taken over by that worker (which ends the old run itself).
func TestHandoverAndCrashWithASuccessorAreNoOrphans(t *testing.T) {
	e := newEnv(t)
	p := project()
	_, reader := e.reconcilerLeader(t, p, "node-r", "other")
	a, proxy := e.startCuttableNode(t, slowCycle(fast(p, "node-a", "shared")))
	first := e.ownedRun(t, a, "shared", "node-a leads shared", nil)
	c := e.startNode(t, slowCycle(fast(p, "node-c", "shared")), e.tc)
	// A crash with a successor: node-c takes over and ends node-a's run itself.
	proxy.Blackhole()
	second := e.ownedRun(t, c, "shared", "node-c takes shared over", nil)
	proxy.Heal()
	// A graceful stop of node-c with node-a in line again.
	eventually(t, 30*time.Second, "node-a is back", func() error {
		if st := a.Status(); st.SessionValidUntil.IsZero() {
			return fmt.Errorf("node-a has no session yet")
		}
		return nil
	})
	ctx := t.Context()
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	third := e.ownedRun(t, a, "shared", "node-a takes shared back", nil)
	// Past the grace, with room to spare.
	time.Sleep(reconciler.DefaultOrphanGrace + 2*time.Second)
	if n := orphanCount(t, reader); n != 0 {
		t.Errorf("%s = %d after a handover and a crash with a successor, want 0", reconciler.MetricOrphans, n)
	}
	for _, run := range []baton.QueueStatus{first, second} {
		iter := e.tc.GetWorkflowHistory(t.Context(), run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		reason := ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
		if r, _ := takeover.ParseReason(reason); r.Kind == takeover.ReasonStaleHeartbeat || r.Kind == takeover.ReasonNoLiveOwner {
			t.Errorf("run %s was ended by the reconciler (%q), want by its successor or owner", run.RunID, reason)
		}
	}
	if e.status(t, third.WorkflowID, third.RunID) != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("the live leader's run is not running")
	}
}

package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/tests/testkit"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// terminator observes every terminate the reconciler makes, before passing it to the real client.
type terminator struct {
	inner  reconciler.Temporal
	before func(workflowID, runID string)
	calls  atomic.Int32
}

func (o *terminator) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	return o.inner.ListWorkflow(ctx, req)
}

func (o *terminator) TerminateWorkflowWithOptions(ctx context.Context, opts client.TerminateWorkflowOptions) error {
	o.calls.Add(1)
	if o.before != nil {
		o.before(opts.WorkflowID, opts.RunID+opts.FirstExecutionRunID)
	}
	return o.inner.TerminateWorkflowWithOptions(ctx, opts)
}

// leaders runs a hook after each real leader lookup, before the reconciler acts on the answer.
type leaders struct {
	inner reconciler.Leaders
	after func()
}

func (l *leaders) Leader(ctx context.Context, project, queue string) (election.Leader, error) {
	ld, err := l.inner.Leader(ctx, project, queue)
	if l.after != nil {
		l.after()
	}
	return ld, err
}

func (l *leaders) Leaders(ctx context.Context, project string) (map[string]election.Leader, error) {
	ls, err := l.inner.Leaders(ctx, project)
	if l.after != nil {
		l.after()
	}
	return ls, err
}

func firstReport(reports []reconciler.Report, from int, ok func(reconciler.Report) bool) (int, bool) {
	for i := from; i < len(reports); i++ {
		if ok(reports[i]) {
			return i, true
		}
	}
	return 0, false
}

// 1. Crash simulation, compressed intervals: an owner stops heartbeating and loses its etcd connection
// without any cleanup. Once etcd expires its lease (nobody leads the queue) its run is terminated and
// its key deleted within 3 reconcile cycles.
func TestCrashedOwnerCleanedUpWithinThreeCycles(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{TTL: 2 * time.Second}, heartbeat.Config{Interval: 200 * time.Millisecond})
	termA, runA, stopHeartbeat := a.lead(t, p, "orders")
	key := a.hb.Key(runA.Owner.Project, runA.WorkflowID)
	rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: time.Second, StaleAfter: time.Second}, nil, nil)
	eventually(t, 15*time.Second, "two cycles", func() error {
		if n := len(rn.reports()); n < 2 {
			return fmt.Errorf("%d cycles", n)
		}
		return nil
	})
	for _, r := range rn.reports() {
		if r.Err != nil || r.Active != 1 || r.Stale != 0 || r.Terminated != 0 {
			t.Fatalf("a healthy owner must be left alone: %+v", r)
		}
	}

	expired := e.watchDelete(t, termA.Key())
	stopHeartbeat()
	a.proxy.Blackhole()
	crash := time.Now()
	select {
	case <-expired:
	case <-time.After(20 * time.Second):
		t.Fatal("etcd did not expire the crashed owner's lease")
	}
	c0 := len(rn.reports())
	var cleaned int
	eventually(t, 30*time.Second, "cleanup", func() error {
		i, ok := firstReport(rn.reports(), c0, func(r reconciler.Report) bool { return r.Deleted > 0 })
		if !ok {
			return errors.New("no cycle deleted the entry yet")
		}
		cleaned = i
		return nil
	})
	if cycles := cleaned - c0 + 1; cycles > 3 {
		t.Fatalf("cleanup took %d cycles after the queue lost its leader, want at most 3", cycles)
	}
	if e.exists(t, key) {
		t.Fatal("heartbeat key still exists")
	}
	if st := e.status(t, runA.WorkflowID, runA.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("crashed owner's run is %v, want TERMINATED", st)
	}
	t.Logf("crash -> cleanup %v (lease TTL 2s, stale after 1s, cycle 1s)", time.Since(crash).Round(time.Millisecond))
}

// 1. Crash simulation with production defaults (heartbeat 10s, stale 30s, cycle 1m, TTL 10s): the
// crashed owner's run and key are gone within the 2-minute SLA.
func TestCrashCleanupWithProductionDefaults(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("takes up to two minutes")
	}
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{})
	_, runA, stopHeartbeat := a.lead(t, p, "orders")
	key := a.hb.Key(runA.Owner.Project, runA.WorkflowID)
	rn := e.reconciler(t, "rec-1", p, reconciler.Config{}, nil, nil)
	eventually(t, 15*time.Second, "first cycle", func() error {
		if len(rn.reports()) == 0 {
			return errors.New("no cycle yet")
		}
		return nil
	})
	stopHeartbeat()
	a.proxy.Blackhole()
	crash := time.Now()
	eventually(t, 2*time.Minute, "cleanup within the SLA", func() error {
		if e.exists(t, key) {
			return errors.New("heartbeat key still exists")
		}
		if st := e.status(t, runA.WorkflowID, runA.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			return fmt.Errorf("run is %v", st)
		}
		return nil
	})
	t.Logf("crash -> run terminated and key deleted in %v (SLA 2m)", time.Since(crash).Round(time.Second))
}

// 2. The run is terminated before its key is deleted: the key still exists when the terminate call
// is made, and the reason names the reconciler.
func TestTerminateBeforeDelete(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
	// The owner goes away leaving run and entry behind.
	runA, key := a.abandon(t, p, "orders")
	var mu sync.Mutex
	var seen []string
	term := &terminator{inner: e.tc, before: func(wf, run string) {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, fmt.Sprintf("%s/%s key-exists=%v run=%v", wf, run, e.exists(t, key), e.status(t, wf, run)))
	}}
	rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond}, term, nil)
	eventually(t, 15*time.Second, "cleanup", func() error {
		if e.exists(t, key) {
			return errors.New("key still exists")
		}
		return nil
	})
	mu.Lock()
	defer mu.Unlock()
	// Two paths reach the run, the stale Redis entry and the sweep of Temporal's open runs, and which
	// comes first depends on timing (under load the entry is stale by the first cycle); a call on a run
	// already closed is harmless. What must hold: every call came while the key existed, and exactly
	// one found the run running.
	running := fmt.Sprintf("%s/%s key-exists=true run=%v", runA.WorkflowID, runA.RunID, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING)
	closed := fmt.Sprintf("%s/%s key-exists=true run=%v", runA.WorkflowID, runA.RunID, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED)
	effective := 0
	for _, call := range seen {
		switch call {
		case running:
			effective++
		case closed:
		default:
			t.Fatalf("terminate calls %q: %q is neither %q nor %q", seen, call, running, closed)
		}
	}
	if effective != 1 {
		t.Fatalf("terminate calls %q, want exactly one %q", seen, running)
	}
	resp, err := e.tc.DescribeWorkflowExecution(t.Context(), runA.WorkflowID, runA.RunID)
	if err != nil || resp.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("run after cleanup: %v %v", resp.GetWorkflowExecutionInfo().GetStatus(), err)
	}
	iter := e.tc.GetWorkflowHistory(t.Context(), runA.WorkflowID, runA.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	ev, err := iter.Next()
	if err != nil {
		t.Fatal(err)
	}
	reason := ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
	if r, _ := takeover.ParseReason(reason); r.Kind != takeover.ReasonStaleHeartbeat || r.By != "rec-1" || r.Owner != "node-a" {
		t.Fatalf("termination reason %q must name the reconciler and the stale owner", reason)
	}
	if r := rn.reports(); r[len(r)-1].Err != nil {
		t.Fatalf("last cycle failed: %v", r[len(r)-1].Err)
	}
}

// 3. Races with a successor: a successor that takes over and heartbeats between classification and
// cleanup keeps its entry and its run, whether it appears before the pre-terminate re-read or during
// the terminate; and a stale-looking entry of a live leader is never touched.
func TestSuccessorsAreNeverTouched(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"before-reread", "during-terminate"} {
		t.Run(when, func(t *testing.T) {
			e := newEnv(t)
			p := project(t)
			hcfg := heartbeat.Config{Interval: 200 * time.Millisecond}
			a := e.owner(t, "node-a", election.Config{}, hcfg)
			b := e.owner(t, "node-b", election.Config{}, hcfg)
			runA, key := a.abandon(t, p, "orders")
			e.waitStale(t, key, 500*time.Millisecond)

			var once sync.Once
			var termB *election.Term
			var runB = make(chan string, 1)
			successor := func() {
				once.Do(func() {
					var run string
					termB, run = takeOverAndBeat(t, e, b, p, "orders", key)
					runB <- run
				})
			}
			term := &terminator{inner: e.tc}
			ld := &leaders{inner: a.el}
			if when == "before-reread" {
				ld.after = successor
			} else {
				term.before = func(string, string) { successor() }
			}
			rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond}, term, ld)
			var b2 string
			select {
			case b2 = <-runB:
			case <-time.After(15 * time.Second):
				t.Fatal("the reconciler never looked at the stale entry")
			}
			eventually(t, 10*time.Second, "a cycle after the successor", func() error {
				if _, ok := firstReport(rn.reports(), 0, func(r reconciler.Report) bool { return r.Refreshed > 0 }); !ok {
					return errors.New("no cycle saw the refreshed entry yet")
				}
				return nil
			})
			// Several more cycles: the successor stays untouched.
			n := len(rn.reports())
			eventually(t, 10*time.Second, "three more cycles", func() error {
				if len(rn.reports()) < n+3 {
					return errors.New("waiting")
				}
				return nil
			})
			if st := e.status(t, runA.WorkflowID, b2); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				t.Fatalf("successor's run is %v, want RUNNING", st)
			}
			fields, err := e.rdb.HGetAll(t.Context(), key).Result()
			if err != nil || fields[heartbeat.FieldRunID] != b2 || fields[heartbeat.FieldToken] != fmt.Sprint(termB.Token()) {
				t.Fatalf("successor's entry %v (%v), want run %s token %d", fields, err, b2, termB.Token())
			}
			if when == "before-reread" && term.calls.Load() != 0 {
				t.Fatalf("%d terminate calls after the entry was refreshed, want none", term.calls.Load())
			}
			if st := e.status(t, runA.WorkflowID, runA.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
				t.Fatalf("old run is %v; the successor's takeover ends it", st)
			}
		})
	}
	t.Run("live-leader-with-stale-entry", func(t *testing.T) {
		e := newEnv(t)
		p := project(t)
		a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
		termA, runA, stopA := a.lead(t, p, "orders")
		key := a.hb.Key(runA.Owner.Project, runA.WorkflowID)
		stopA() // heartbeats stop (Redis trouble on that host), leadership holds
		term := &terminator{inner: e.tc}
		rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: 200 * time.Millisecond, StaleAfter: 300 * time.Millisecond}, term, nil)
		eventually(t, 15*time.Second, "cycles that see the stale entry", func() error {
			var protected int
			for _, r := range rn.reports() {
				protected += r.Protected
			}
			if protected < 3 {
				return fmt.Errorf("protected %d times", protected)
			}
			return nil
		})
		if term.calls.Load() != 0 || !e.exists(t, key) || termA.Err() != nil {
			t.Fatalf("live leader's entry touched: %d terminate calls, key exists %v, term %v", term.calls.Load(), e.exists(t, key), termA.Err())
		}
		if st := e.status(t, runA.WorkflowID, runA.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("live leader's run is %v", st)
		}
	})
}

// takeOverAndBeat makes o the queue's new owner and writes its first heartbeat; it returns the term
// and the new run ID. Heartbeats go on until the test ends.
func takeOverAndBeat(t *testing.T, e *env, o *owner, project, queue, key string) (*election.Term, string) {
	term, run, _ := o.lead(t, project, queue)
	eventually(t, 5*time.Second, "successor's heartbeat", func() error {
		v, err := e.rdb.HGet(t.Context(), key, heartbeat.FieldRunID).Result()
		if err != nil || v != run.RunID {
			return fmt.Errorf("entry run %q (%v)", v, err)
		}
		return nil
	})
	return term, run.RunID
}

// 4. One reconciler per project across 3 nodes: cycles never overlap and come from one leader at a
// time; when the leader stops, another takes over.
func TestOneReconcilerPerProject(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	cfg := reconciler.Config{Interval: 200 * time.Millisecond, StaleAfter: time.Second}
	nodes := []*reconcilerNode{
		e.reconciler(t, "rec-1", p, cfg, nil, nil),
		e.reconciler(t, "rec-2", p, cfg, nil, nil),
		e.reconciler(t, "rec-3", p, cfg, nil, nil),
	}
	all := func() []reconciler.Report {
		var out []reconciler.Report
		for _, n := range nodes {
			out = append(out, n.reports()...)
		}
		slices.SortFunc(out, func(a, b reconciler.Report) int { return a.Started.Compare(b.Started) })
		return out
	}
	start := time.Now()
	eventually(t, 20*time.Second, "10 cycles", func() error {
		if n := len(all()); n < 10 {
			return fmt.Errorf("%d cycles", n)
		}
		return nil
	})
	first := all()
	leader := first[0].ServerID
	for _, r := range first {
		if r.ServerID != leader || r.Token != first[0].Token {
			t.Fatalf("cycles from %s (token %d) and %s (token %d) in one term", leader, first[0].Token, r.ServerID, r.Token)
		}
	}
	elapsed := time.Since(start)
	if max := int(elapsed/(180*time.Millisecond)) + 2; len(first) > max {
		t.Fatalf("%d cycles in %v across 3 nodes: more than one node cycles", len(first), elapsed)
	}
	var stopped *reconcilerNode
	for _, n := range nodes {
		if n.id == leader {
			stopped = n
		}
	}
	stopped.stop()
	before := len(stopped.reports())
	eventually(t, 20*time.Second, "a new reconciler leader", func() error {
		for _, r := range all() {
			if r.ServerID != leader {
				return nil
			}
		}
		return errors.New("no cycle from another node yet")
	})
	eventually(t, 20*time.Second, "5 more cycles", func() error {
		if n := len(all()); n < len(first)+5 {
			return fmt.Errorf("%d cycles", n)
		}
		return nil
	})
	if len(stopped.reports()) != before {
		t.Fatal("the stopped node kept cycling")
	}
	reports := all()
	for i := 1; i < len(reports); i++ {
		prev, cur := reports[i-1], reports[i]
		if cur.Started.Before(prev.Started.Add(prev.Duration)) {
			t.Fatalf("cycles overlap: %s/%d at %v for %v and %s/%d at %v", prev.ServerID, prev.Token, prev.Started,
				prev.Duration, cur.ServerID, cur.Token, cur.Started)
		}
	}
	servers := map[string]int64{}
	for _, r := range reports {
		if tok, ok := servers[r.ServerID]; ok && tok != r.Token {
			t.Fatalf("%s cycled with tokens %d and %d: it should have led once", r.ServerID, tok, r.Token)
		}
		servers[r.ServerID] = r.Token
	}
	if len(servers) != 2 {
		t.Fatalf("cycles from %d nodes, want the first leader and one successor: %v", len(servers), servers)
	}
}

// 5. Redis stopped and restarted mid-run: cycle errors are counted, nothing crashes, cycles and
// heartbeats recover, and neither the queue's nor the reconciler's leadership changes.
func TestRedisRestartMidRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	redisx.SkipExternal(t, e.redis)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
	termA, runA, _ := a.lead(t, p, "orders")
	key := a.hb.Key(runA.Owner.Project, runA.WorkflowID)
	rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: 200 * time.Millisecond, StaleAfter: 3 * time.Second}, nil, nil)
	eventually(t, 15*time.Second, "healthy cycles", func() error {
		if _, ok := firstReport(rn.reports(), 0, func(r reconciler.Report) bool { return r.Err == nil && r.Active == 1 }); !ok {
			return errors.New("no healthy cycle yet")
		}
		return nil
	})
	token := rn.reports()[0].Token

	if err := e.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	c0 := len(rn.reports())
	eventually(t, 20*time.Second, "failed cycles", func() error {
		var failed int
		for _, r := range rn.reports()[c0:] {
			if r.Err != nil {
				failed++
			}
		}
		if failed < 2 {
			return fmt.Errorf("%d failed cycles", failed)
		}
		return nil
	})
	if err := e.redis.Restart(); err != nil {
		t.Fatal(err)
	}
	c1 := len(rn.reports())
	eventually(t, 20*time.Second, "recovery", func() error {
		// What is judged is recovery within the bound, not the first request after the restart: an
		// error is waited out like a missing key.
		if n, err := e.rdb.Exists(t.Context(), key).Result(); err != nil || n != 1 {
			return fmt.Errorf("heartbeat not written again (%d, %v)", n, err)
		}
		if _, ok := firstReport(rn.reports(), c1, func(r reconciler.Report) bool { return r.Err == nil && r.Active == 1 }); !ok {
			return errors.New("no healthy cycle since the restart")
		}
		return nil
	})
	if termA.Err() != nil {
		t.Fatalf("queue leadership lost over a Redis restart: %v", termA.Err())
	}
	// A reconciler that cannot reach Redis resigns after a few failed cycles and stands again once Redis
	// answers: the only candidate may come back with a new term, never anyone else.
	for _, r := range rn.reports() {
		if r.Token < token || r.ServerID != "rec-1" {
			t.Fatalf("reconciler leadership moved over a Redis restart: %s/%d, first %d", r.ServerID, r.Token, token)
		}
		if r.Terminated != 0 {
			t.Fatalf("a healthy run was terminated: %+v", r)
		}
	}
	if st := e.status(t, runA.WorkflowID, runA.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("run is %v", st)
	}
}

// Garbage in Redis under the heartbeat prefix is counted as cleanup errors and logged with its key; it
// never stops a cycle and is never acted on (an entry that names another workflow is not terminated).
func TestMalformedEntriesNeverStopACycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
	runA, key := a.abandon(t, p, "orders")
	ctx := t.Context()
	garbage := map[string]func(k string) error{
		"string":    func(k string) error { return e.rdb.Set(ctx, k, "\xff\x00garbage", 0).Err() },
		"list":      func(k string) error { return e.rdb.RPush(ctx, k, "x").Err() },
		"bad-token": func(k string) error { return e.rdb.HSet(ctx, k, "token", "NaN", "run_id", "r").Err() },
		"other-workflow": func(k string) error {
			return e.rdb.HSet(ctx, k, "workflow_id", "payments-cron", "run_id", "r", "server_id", "s", "token", "1",
				"project", p, "queue", "orders", "updated_ms", "1").Err()
		},
	}
	for name, put := range garbage {
		if err := put(heartbeat.ProjectPrefix(e.pfx, p) + name); err != nil { // in the project's range, which the cycle scans
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var targets []string
	term := &terminator{inner: e.tc, before: func(wf, run string) {
		mu.Lock()
		defer mu.Unlock()
		targets = append(targets, wf+"/"+run)
	}}
	rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond}, term, nil)
	eventually(t, 15*time.Second, "the real stale entry cleaned", func() error {
		if e.exists(t, key) {
			return errors.New("key still exists")
		}
		return nil
	})
	for _, r := range rn.reports() {
		if r.Err != nil || r.Malformed != len(garbage) || r.CleanupErrors < len(garbage) {
			t.Fatalf("cycle %+v: want no error and %d malformed entries counted", r, len(garbage))
		}
	}
	// The real stale run only (reached by the stale entry, by the sweep of open runs, or both,
	// depending on timing); never anything a garbage entry names.
	mu.Lock()
	defer mu.Unlock()
	if len(targets) == 0 {
		t.Fatal("the real stale run was never terminated")
	}
	for _, target := range targets {
		if target != runA.WorkflowID+"/"+runA.RunID {
			t.Fatalf("terminate calls %q: want only %s/%s, the real stale run", targets, runA.WorkflowID, runA.RunID)
		}
	}
	for name := range garbage {
		if !e.exists(t, heartbeat.ProjectPrefix(e.pfx, p)+name) {
			t.Fatalf("malformed entry %s was deleted; it must be left for an operator", name)
		}
	}
}

// A crashed owner whose run continued as new after its last heartbeat: the entry still names the
// first run of the chain, which is closed. Cleanup ends the chain's current run (by the chain's first
// run ID), not only the closed one, so the continued run does not run on without an owner.
func TestCrashedOwnersContinuedRunIsCleanedUp(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	testkit.RunClosingDispatcher(t, e.tc, takeover.DefaultTaskQueue(p, "orders"))
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 200 * time.Millisecond})
	mgr, err := takeover.New(e.tc, takeover.Config{WorkflowType: testkit.ClosingDispatcher, StepDown: takeover.LeaveRunning})
	if err != nil {
		t.Fatal(err)
	}
	a.mgr = mgr
	runA, key := a.abandon(t, p, "orders")
	if err := e.tc.SignalWorkflow(t.Context(), runA.WorkflowID, runA.RunID, testkit.SignalClose, "continue"); err != nil {
		t.Fatal(err)
	}
	var continued string
	eventually(t, 30*time.Second, "the run continues as new", func() error {
		resp, err := e.tc.DescribeWorkflowExecution(t.Context(), runA.WorkflowID, "")
		if err != nil {
			return err
		}
		info := resp.GetWorkflowExecutionInfo()
		if continued = info.GetExecution().GetRunId(); continued == runA.RunID || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return fmt.Errorf("current run %s is %v", continued, info.GetStatus())
		}
		return nil
	})
	e.reconciler(t, "rec-1", p, reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond}, nil, nil)
	eventually(t, 30*time.Second, "cleanup", func() error {
		if e.exists(t, key) {
			return errors.New("key still exists")
		}
		return nil
	})
	if st := e.status(t, runA.WorkflowID, continued); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("the crashed owner's continued run is %v after cleanup: it runs on with no owner", st)
	}
}

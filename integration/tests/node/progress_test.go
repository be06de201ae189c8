package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/faults"
	"github.com/baton-run/baton/internal/opscli"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/takeover"
)

// watched is a Config whose owner checks its runs' progress quickly.
func watched(project, id string, queues ...string) baton.Config {
	cfg := fast(project, id, queues...)
	cfg.Progress = progress.Config{Interval: 200 * time.Millisecond, PendingMax: 2 * time.Second, FailingAttempts: 2,
		TaskStuckAfter: 2 * time.Second, CallTimeout: time.Second}
	return cfg
}

// dispatchWorker runs the reference dispatcher on queue's task queue with handler, and the etcd ledger.
func (e *env) dispatchWorker(t *testing.T, project, queue string, ledger dispatcher.Ledger, handler dispatcher.Handler) worker.Worker {
	t.Helper()
	w := worker.New(e.tc, takeover.DefaultTaskQueue(project, queue), worker.Options{})
	dispatcher.Register(w, &dispatcher.Activities{Ledger: ledger, Handler: handler, History: e.tc})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

// startWatched starts one worker, w1, leading q1 of a new project with quick progress checks.
func startWatched(t *testing.T) (*env, string, *baton.Node) {
	t.Helper()
	e := newEnv(t)
	p := project()
	app, n := e.app(t, watched(p, "w1", "q1"))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	return e, p, n
}

// ledger is the etcd dispatch ledger on e's etcd.
func (e *env) ledger(t *testing.T) *ledger.Etcd {
	t.Helper()
	l, err := ledger.New(etcdx.Client(t, e.etcd), ledger.Config{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// send signals request i to queue's dispatcher.
func (e *env) send(t *testing.T, project, queue string, i int) {
	t.Helper()
	id, _ := takeover.WorkflowID(project, queue)
	req := dispatcher.Request{Type: "agent", TaskID: fmt.Sprintf("t%d", i), PayloadSHA256: fmt.Sprintf("%064x", i)}
	if err := e.tc.SignalWorkflow(t.Context(), id, "", dispatcher.SignalDispatch, req); err != nil {
		t.Fatal(err)
	}
}

// stalledWith waits until n's readiness fails with ErrDispatcherStalled and its status shows cause on
// queue, and returns the report.
func stalledWith(t *testing.T, n *baton.Node, queue string, cause progress.Cause) progress.Report {
	t.Helper()
	var rep progress.Report
	eventually(t, 60*time.Second, fmt.Sprintf("%s stalled with %s", queue, cause), func() error {
		qs, ok := leading(n, queue)
		if !ok || qs.Progress == nil || qs.Progress.Cause != cause {
			return fmt.Errorf("status of %s: leading %v, progress %+v", queue, ok, qs.Progress)
		}
		if err := n.Ready(); !errors.Is(err, baton.ErrDispatcherStalled) {
			return fmt.Errorf("readiness %v, want ErrDispatcherStalled", err)
		}
		rep = *qs.Progress
		return nil
	})
	return rep
}

// healthy waits until n's readiness passes with queue's run judged making progress.
func healthy(t *testing.T, n *baton.Node, queue string) {
	t.Helper()
	eventually(t, 60*time.Second, queue+" making progress", func() error {
		if qs, ok := leading(n, queue); !ok || qs.Progress == nil || qs.Progress.Stalled() {
			return fmt.Errorf("status of %s: leading %v, progress %+v", queue, ok, qs.Progress)
		}
		return n.Ready()
	})
}

// A leader whose run nobody can run (no process polls the dispatcher's task queue) says so: readiness
// fails with the cause, status shows it; once a worker polls, the run makes progress and readiness
// passes again.
func TestProgressNobodyPolls(t *testing.T) {
	e, p, n := startWatched(t)
	rep := stalledWith(t, n, "q1", progress.CauseNoPollers)
	t.Logf("stalled: %s", rep.Detail)
	ledger := e.ledger(t)
	e.dispatchWorker(t, p, "q1", ledger, func(context.Context, string, dispatcher.Request, takeover.Owner) error { return nil })
	healthy(t, n, "q1")
}

// A request whose handler does not return holds the run's oldest pending request past PendingMax:
// readiness fails with oldest_pending and the request's age; once the handler returns, it passes.
func TestProgressOldestPending(t *testing.T) {
	e, p, n := startWatched(t)
	ledger := e.ledger(t)
	release := make(chan struct{})
	e.dispatchWorker(t, p, "q1", ledger, func(ctx context.Context, _ string, _ dispatcher.Request, _ takeover.Owner) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	healthy(t, n, "q1")
	e.send(t, p, "q1", 1)
	rep := stalledWith(t, n, "q1", progress.CauseOldestPending)
	if rep.Progress == nil || rep.Progress.InFlight+rep.Progress.Waiting != 1 || rep.OldestPendingAge < 2*time.Second {
		t.Fatalf("report %+v, want one request held for more than 2s", rep)
	}
	close(release)
	healthy(t, n, "q1")
}

// A dispatch activity that fails every attempt (the ledger refuses every write) is a loop the owner
// names; once the ledger writes again, the run makes progress.
func TestProgressDispatchFailing(t *testing.T) {
	e, p, n := startWatched(t)
	ledger := &faults.Ledger{}
	ledger.Failing.Store(true)
	e.dispatchWorker(t, p, "q1", ledger, func(context.Context, string, dispatcher.Request, takeover.Owner) error { return nil })
	healthy(t, n, "q1")
	e.send(t, p, "q1", 2)
	rep := stalledWith(t, n, "q1", progress.CauseDispatchFailing)
	t.Logf("stalled: %s", rep.Detail)
	ledger.Failing.Store(false)
	healthy(t, n, "q1")
}

// A workflow task that fails on every attempt (a dispatcher whose code panics, as after a bad
// deploy) is stuck: the owner names it; once a good worker replaces the broken one, the run makes
// progress.
func TestProgressWorkflowTaskStuck(t *testing.T) {
	e, p, n := startWatched(t)
	broken := worker.New(e.tc, takeover.DefaultTaskQueue(p, "q1"), worker.Options{})
	broken.RegisterWorkflowWithOptions(func(workflow.Context, dispatcher.Input) error { panic("a broken deploy") },
		workflow.RegisterOptions{Name: takeover.DefaultWorkflowType})
	if err := broken.Start(); err != nil {
		t.Fatal(err)
	}
	rep := stalledWith(t, n, "q1", progress.CauseTaskStuck)
	t.Logf("stalled: %s", rep.Detail)
	broken.Stop()
	e.dispatchWorker(t, p, "q1", e.ledger(t), func(context.Context, string, dispatcher.Request, takeover.Owner) error { return nil })
	healthy(t, n, "q1")
}

// An owner that cannot reach Temporal (its connection partitioned, while the workers reach it) says
// so; alone, it keeps the queue, and once the partition heals the run makes progress again. With
// another worker standing for the queue, it hands the queue over to it (balance's unfit path), whose
// run then makes progress.
func TestProgressTemporalUnreachable(t *testing.T) {
	e := newEnv(t)
	p := project()
	proxy := etcdx.NewTestProxy(t, e.cc.TemporalAddress)
	cut := *e
	cut.cc.TemporalAddress = proxy.Addr()
	app, n := cut.app(t, watched(p, "w1", "q1"))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	e.dispatchWorker(t, p, "q1", e.ledger(t), func(context.Context, string, dispatcher.Request, takeover.Owner) error { return nil })
	healthy(t, n, "q1")
	before, _ := leading(n, "q1")

	proxy.Blackhole()
	rep := stalledWith(t, n, "q1", progress.CauseUnreachable)
	t.Logf("stalled: %s", rep.Detail)
	time.Sleep(2 * time.Second) // ten intervals: nobody else stands, so it keeps the queue
	if qs, ok := leading(n, "q1"); !ok || qs.Token != before.Token {
		t.Fatalf("alone and cut from Temporal, w1 no longer leads q1 at token %d: %+v", before.Token, qs)
	}
	proxy.Heal()
	healthy(t, n, "q1")

	app2, n2 := e.app(t, watched(p, "w2", "q1"))
	app2.RequireStart()
	t.Cleanup(app2.RequireStop)
	eventually(t, 30*time.Second, "w2 stands for q1", func() error {
		if qs, _ := leading(n2, "q1"); qs.Leader != "w1" {
			return fmt.Errorf("w2 sees leader %q", qs.Leader)
		}
		return nil
	})
	proxy.Blackhole()
	eventually(t, 60*time.Second, "w2 leads q1 with its run making progress", func() error {
		qs, ok := leading(n2, "q1")
		if !ok || !qs.DispatcherOpen || qs.Progress == nil || qs.Progress.Stalled() {
			return fmt.Errorf("w2: leading %v, %+v", ok, qs.Progress)
		}
		return nil
	})
	proxy.Heal()
}

// A dispatcher run whose start fails every time (an application's start code refused its first
// write, say) is replaced again and again and is open most of the time, yet the worker is not ready:
// readiness names the queue and the last close within three replacements. (Before, /readyz stayed
// green through the whole loop.)
func TestARunThatFailsToStartEveryTimeTurnsReadinessRed(t *testing.T) {
	e := newEnv(t)
	p, queue := project(), "orders"
	const workflowType = "test.FailingStart"
	w := worker.New(e.tc, takeover.DefaultTaskQueue(p, queue), worker.Options{})
	w.RegisterWorkflowWithOptions(func(workflow.Context, takeover.Owner) error {
		return temporal.NewNonRetryableApplicationError("announce refused: permission denied", "AnnounceRefused", nil)
	}, workflow.RegisterOptions{Name: workflowType})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	cfg := fast(p, "node-a", queue)
	cfg.Takeover.WorkflowType = workflowType
	n := e.startNode(t, cfg, e.tc)
	eventually(t, time.Minute, "readiness fails with ErrRunsFailing", func() error {
		err := n.Ready()
		if !errors.Is(err, baton.ErrRunsFailing) {
			return fmt.Errorf("readiness %v, want ErrRunsFailing", err)
		}
		if !strings.Contains(err.Error(), queue) || !strings.Contains(err.Error(), "closed") {
			return fmt.Errorf("readiness %v: want the queue and the last close named", err)
		}
		return nil
	})
	if s := n.Status(); s.Queues[0].Replacements > 3 {
		t.Errorf("readiness red only after %d replacements; want within 3", s.Queues[0].Replacements)
	}
	// An operator sees it from outside too: baton verify fails naming the check, and baton status's
	// DISPATCH column counts the runs. (Before, both said healthy.)
	eventually(t, 30*time.Second, "baton verify names the failing runs", func() error {
		out, errOut, code := e.baton(t, p, "verify", "-json", "-queues", queue, "-reconciler-max", "1h")
		var v struct {
			Violations []struct{ Check, Queue, Detail string }
		}
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			return fmt.Errorf("baton verify -json: %v\n%s%s", err, out, errOut)
		}
		if code != 1 || !slices.ContainsFunc(v.Violations, func(x struct{ Check, Queue, Detail string }) bool {
			return x.Check == opscli.CheckRunsFailing && x.Queue == queue
		}) {
			return fmt.Errorf("baton verify: exit %d, want 1 and %s on %s\n%s%s", code, opscli.CheckRunsFailing, queue, out, errOut)
		}
		return nil
	})
	out, errOut, _ := e.baton(t, p, "status", "-queues", queue)
	if !strings.Contains(out, "RUNS-FAILING:") {
		t.Errorf("baton status shows no RUNS-FAILING in DISPATCH:\n%s%s", out, errOut)
	}
}

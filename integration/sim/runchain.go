package sim

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// owner is the chain's owner.
func (w *RunWorld) owner() takeover.Owner {
	return takeover.Owner{Project: Project, Queue: carryQueue, ServerID: "p1", Token: 2}
}

// chain runs the chain's runs, each in its own environment, until the last one is cancelled at the
// end of the schedule; it returns the mock time it ended at.
func (w *RunWorld) chain() time.Time {
	in, now := w.chainInput, w.start
	end := w.start.Add(w.plan.storm + runHealBound)
	progressChecked := false
	for run := 1; ; run++ {
		if run > runMaxRuns {
			w.violate("%d runs in one schedule: the chain continues as new without end", runMaxRuns)
			return now
		}
		env := w.newEnv(now)
		arrived := 0
		w.schedule(env, now, &arrived)
		if at := w.start.Add(runProgressBound); !progressChecked && !at.Before(now) {
			env.RegisterDelayedCallback(func() { progressChecked = true; w.checkProgress() }, at.Sub(now))
		}
		env.RegisterDelayedCallback(env.CancelWorkflow, end.Sub(now))
		w.rec.Add("world", "run %d starts: %d pending, %d sources", run, len(carriedPending(in)), len(carriedBacklog(in)))
		env.ExecuteWorkflow(dispatcher.WorkflowName, in)
		now = env.Now()
		w.clk.set(now)
		var can *workflow.ContinueAsNewError
		if err := env.GetWorkflowError(); !errors.As(err, &can) {
			w.rec.Add("world", "run %d ended: %v", run, err)
			return now
		}
		var next dispatcher.Input
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			w.t.Fatal(err)
		}
		if w.paged(in, next) {
			w.probe(ProbeRunPageCarried)
		}
		w.rec.Add("world", "run %d continued as new: %d pending, %d sources", run, len(carriedPending(next)), len(carriedBacklog(next)))
		in = next
	}
}

// paged reports whether a run read a page of its backlog before it continued as new.
func (w *RunWorld) paged(in, next dispatcher.Input) bool {
	a, b := carriedBacklog(in), carriedBacklog(next)
	return len(a) != len(b) || len(a) > 0 && a[0].Offset != b[0].Offset
}

func carriedPending(in dispatcher.Input) []dispatcher.Request {
	if in.Carry == nil {
		return nil
	}
	return in.Carry.Pending
}

func carriedBacklog(in dispatcher.Input) []dispatcher.Source {
	if in.Carry == nil {
		return nil
	}
	return in.Carry.Backlog
}

// newEnv is a run's environment at mock time now: the reference workflow and its real activities,
// the Backlog activity behind the seed's failures.
func (w *RunWorld) newEnv(now time.Time) *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	env := suite.NewTestWorkflowEnvironment()
	env.SetStartTime(now)
	if err := dispatcher.RegisterWithOptions(env, w.acts, dispatcher.RegisterOptions{}); err != nil {
		w.t.Fatal(err)
	}
	env.OnActivity(dispatcher.ActivityBacklog, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in dispatcher.BacklogInput) (dispatcher.BacklogPage, error) {
			return w.backlog(ctx, in)
		})
	return env
}

// backlog is the Backlog activity as the seed delays it: the first plan.slowAttempts attempts of
// every page fail (retried after the activity's backoff, in mock time: a page comes back 1, 3 or 7 s
// after it was asked for), then the real activity reads it.
func (w *RunWorld) backlog(ctx context.Context, in dispatcher.BacklogInput) (dispatcher.BacklogPage, error) {
	slow := int(activity.GetInfo(ctx).Attempt) <= w.plan.slowAttempts
	w.mu.Lock()
	w.inFlight = slow
	w.mu.Unlock()
	if slow {
		w.probe(ProbeRunPageRetried)
		w.rec.Add("run", "backlog page attempt %d failed (slow)", activity.GetInfo(ctx).Attempt)
		return dispatcher.BacklogPage{}, temporal.NewApplicationError("sim: the page is slow", "sim.Slow")
	}
	page, err := w.acts.Backlog(ctx, in)
	w.rec.Add("run", "backlog page: %d requests, %d sources next, err %v", len(page.Requests), len(page.Next), err)
	return page, err
}

// schedule registers the next arrival with env (one at a time: the environment's queue of callbacks
// is bounded), at mock time now.
func (w *RunWorld) schedule(env *testsuite.TestWorkflowEnvironment, now time.Time, arrived *int) {
	if w.next >= len(w.arrivals) {
		return
	}
	i := w.next
	at := max(w.start.Add(time.Duration(i)*w.plan.interval).Sub(now), time.Millisecond)
	env.RegisterDelayedCallback(func() { w.arrive(env, i, arrived) }, at)
}

// arrive sends arrival i to the run of env, and schedules the next; after suggestAfter arrivals in
// the run, during the storm, Temporal suggests continue-as-new.
func (w *RunWorld) arrive(env *testsuite.TestWorkflowEnvironment, i int, arrived *int) {
	w.mu.Lock()
	w.next = i + 1
	r := w.arrivals[i]
	w.sent[r.Key()] = true
	w.mu.Unlock()
	w.clk.set(env.Now())
	w.schedule(env, env.Now(), arrived)
	// The environment delivers the signal in a callback of its own, after the workflow task this
	// timer starts: the suggestion follows the signal the same way, or the run would continue as new
	// in that task and the signal reach a closed run (a server fails such a workflow task and sends
	// the signal to the new task; the environment drops it).
	env.SignalWorkflow(dispatcher.SignalDispatch, r)
	if *arrived++; *arrived == w.plan.suggestAfter {
		env.RegisterDelayedCallback(func() {
			env.SetContinueAsNewSuggested(true)
			if w.pageInFlight() {
				w.probe(ProbeRunDueInFlight)
			}
			w.rec.Add("world", "continue-as-new suggested")
		}, 0)
	}
}

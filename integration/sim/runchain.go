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
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.steppedDown {
		return w.chainOwner
	}
	return takeover.Owner{Project: Project, Queue: carryQueue, ServerID: "p1", Token: 2}
}

// chain runs the chain's runs, each in its own environment, until the last one is cancelled at the
// end of the schedule; it returns the mock time it ended at.
func (w *RunWorld) chain() time.Time {
	in, now := w.chainInput, w.start
	end := w.start.Add(w.plan.storm + runHealBound)
	progressChecked := false
	w.mirrorStart("chain", in)
	for run := 1; ; run++ {
		if run > runMaxRuns {
			w.violate("%d runs in one schedule: the chain continues as new without end", runMaxRuns)
			return now
		}
		env := w.newEnv(now)
		w.beginRun(run, in, now)
		arrived := 0
		w.schedule(env, now, &arrived)
		w.armQuiesce(env, now)
		if at := w.start.Add(runProgressBound); !progressChecked && !at.Before(now) {
			env.RegisterDelayedCallback(func() { progressChecked = true; w.checkProgress() }, at.Sub(now))
		}
		env.RegisterDelayedCallback(env.CancelWorkflow, end.Sub(now))
		w.rec.Add("world", "run %d starts: %d pending, %d sources", run, len(carriedPending(in)), len(carriedBacklog(in)))
		env.ExecuteWorkflow(dispatcher.WorkflowName, in)
		now = env.Now()
		w.clk.set(now)
		var goOn bool
		if in, goOn = w.ended(run, env, in); !goOn {
			return now
		}
	}
}

// ended settles run, started with in, once its environment returned: it returns the next run's
// input, and false when the chain is over (the run was cancelled at the schedule's end).
func (w *RunWorld) ended(run int, env *testsuite.TestWorkflowEnvironment, in dispatcher.Input) (dispatcher.Input, bool) {
	var can *workflow.ContinueAsNewError
	err := env.GetWorkflowError()
	w.endRun(run, errors.As(err, &can))
	var next dispatcher.Input
	if can != nil {
		if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
			w.t.Fatal(err)
		}
		if w.paged(in, next) {
			w.probe(ProbeRunPageCarried)
		}
		w.mirrorContinue(next)
		w.rec.Add("world", "run %d continued as new: %d pending, %d sources", run, len(carriedPending(next)), len(carriedBacklog(next)))
	}
	if w.stepDownDue(run) {
		w.rec.Add("world", "run %d ended for the step-down: %v", run, err)
		return w.stepDown(), true
	}
	if can == nil {
		w.rec.Add("world", "run %d ended: %v", run, err)
	}
	return next, can != nil
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
	env.OnActivity(dispatcher.ActivityDispatchBatch, mock.Anything, mock.Anything).Return(
		func(ctx context.Context, b dispatcher.Batch) (dispatcher.BatchResult, error) {
			return w.dispatchBatch(ctx, b)
		})
	return env
}

// beginRun readies the world for run, started with in at now: what its input carries in Pending,
// and the updates the previous run left unanswered, sent again.
func (w *RunWorld) beginRun(run int, in dispatcher.Input, now time.Time) {
	w.mu.Lock()
	w.runNo = run
	w.runPending = map[string]bool{}
	for _, r := range carriedPending(in) {
		w.runPending[r.Key()] = true
	}
	w.mu.Unlock()
	w.resendDeferred(now)
}

// dispatchBatch is the DispatchBatch activity as the seed delays it: the first attempts of a batch
// of one batch in five (up to plan.slowDispatch, drawn from the seed and the batch's first key, so
// whatever order activities run in) fail and are retried after the activity's backoff (in mock time), then the
// real activity runs. The batch counts as in flight from its first attempt to its return.
func (w *RunWorld) dispatchBatch(ctx context.Context, b dispatcher.Batch) (dispatcher.BatchResult, error) {
	attempt := int(activity.GetInfo(ctx).Attempt)
	slow := 0
	if d := keyDraw(w.s.Seed, b.Items[0].Key); w.plan.slowDispatch > 0 && d%5 == 0 {
		slow = 1 + int(d/5%uint64(w.plan.slowDispatch))
	}
	if attempt == 1 {
		w.dispatchBegun(b)
	}
	if attempt <= slow {
		w.rec.Add("run", "dispatch of %s attempt %d failed (slow)", b.Items[0].Request.TaskID, attempt)
		return dispatcher.BatchResult{}, temporal.NewApplicationError("sim: the dispatch is slow", "sim.Slow")
	}
	res, err := w.acts.DispatchBatch(ctx, b)
	w.dispatchEnded(b, res, err)
	return res, err
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
	if err == nil {
		w.mirrorCompleted(w.mirrorScheduled(dispatcher.ActivityBacklog, in), page)
	}
	return page, err
}

// schedule registers the next send with env (one at a time: the environment's queue of callbacks
// is bounded), at mock time now.
func (w *RunWorld) schedule(env *testsuite.TestWorkflowEnvironment, now time.Time, arrived *int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.next >= len(w.sends) {
		return
	}
	i := w.next
	at := max(w.sends[i].at.Sub(now), time.Millisecond)
	env.RegisterDelayedCallback(func() { w.arrive(env, i, arrived) }, at)
}

// arrive sends send i to the run of env, and schedules the next; after suggestAfter sends in
// the run, during the storm, Temporal suggests continue-as-new.
func (w *RunWorld) arrive(env *testsuite.TestWorkflowEnvironment, i int, arrived *int) {
	w.mu.Lock()
	w.next = i + 1
	s := w.sends[i]
	w.mu.Unlock()
	w.clk.set(env.Now())
	w.schedule(env, env.Now(), arrived)
	// The environment delivers the signal in a callback of its own, after the workflow task this
	// timer starts: the suggestion follows the signal the same way, or the run would continue as new
	// in that task and the signal reach a closed run (a server fails such a workflow task and sends
	// the signal to the new task; the environment drops it).
	w.deliver(env, s)
	if *arrived++; *arrived == w.plan.suggestAfter {
		env.RegisterDelayedCallback(func() {
			env.SetContinueAsNewSuggested(true)
			if w.pageInFlight() {
				w.probe(ProbeRunDueInFlight)
			}
			w.rec.Add("world", "continue-as-new suggested")
			// A workflow task follows the suggestion at once, as a server's next event would: the
			// owner's takeover signal wakes the run. Otherwise a run with nothing in flight stays
			// due and asleep until the next send's callback, whose workflow task the environment
			// runs before it delivers that send: the run would continue as new in that task and the
			// environment drop the send (a server fails such a task and delivers it to the next).
			env.SignalWorkflow(dispatcher.SignalTakeover, w.owner())
		}, 0)
	}
}

package sim

import (
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// quiesceTries bounds how long (in steps of quiesceRetry) a planned step-down waits for a dispatch
// in flight before it quiesces anyway.
const (
	quiesceTries = 30
	quiesceRetry = 100 * time.Millisecond
)

// armQuiesce registers the seed's step-down with the run of env, started at now: at plan.quiesceAt
// into the storm (or at once, if a run continued as new past it), once a dispatch is in flight or
// quiesceTries later.
func (w *RunWorld) armQuiesce(env *testsuite.TestWorkflowEnvironment, now time.Time) {
	w.mu.Lock()
	armed := w.plan.quiesceAt > 0 && !w.quiesceSent
	w.mu.Unlock()
	if armed {
		env.RegisterDelayedCallback(func() { w.quiesce(env, 0) }, max(w.start.Add(w.plan.quiesceAt).Sub(now), time.Millisecond))
	}
}

// quiesce sends the owner's UpdateQuiesce to the run of env, as takeover.Manager.StepDown does.
func (w *RunWorld) quiesce(env *testsuite.TestWorkflowEnvironment, tries int) {
	w.mu.Lock()
	inFlight := w.dispatches
	if inFlight == 0 && tries < quiesceTries {
		w.mu.Unlock()
		env.RegisterDelayedCallback(func() { w.quiesce(env, tries+1) }, quiesceRetry)
		return
	}
	w.quiesceSent = true
	c := &quiesceCall{w: w, run: w.runNo, waited: inFlight > 0}
	w.mu.Unlock()
	w.clk.set(env.Now())
	w.rec.Add("world", "quiesce sent to run %d, %d dispatch batches in flight", c.run, inFlight)
	env.UpdateWorkflow(takeover.UpdateQuiesce, "quiesce", c)
	w.stepDownWhenQuiesced(env)
}

// stepDownWhenQuiesced ends the run of env (the step-down terminates it; the environment can only
// cancel it) plan.stepDownGap after its quiesce returned: meanwhile signals queue in the run and
// updates are rejected (ErrTypeHandingOver).
func (w *RunWorld) stepDownWhenQuiesced(env *testsuite.TestWorkflowEnvironment) {
	env.RegisterDelayedCallback(func() {
		w.mu.Lock()
		done := w.quiescedRun == w.runNo
		w.mu.Unlock()
		if !done {
			w.stepDownWhenQuiesced(env)
			return
		}
		env.RegisterDelayedCallback(func() {
			w.clk.set(env.Now())
			w.rec.Add("world", "step-down ends run %d", w.runNo)
			env.CancelWorkflow()
		}, w.plan.stepDownGap)
	}, 10*time.Millisecond)
}

// quiesceCall is the quiesce update's callbacks.
type quiesceCall struct {
	w      *RunWorld
	run    int
	waited bool // a dispatch was in flight when it was sent
}

func (c *quiesceCall) Accept() {}

func (c *quiesceCall) Reject(err error) {
	c.w.violate("run %d rejected the quiesce: %v", c.run, err)
}

// Complete: the quiesce returned; no dispatch may be in flight, and none starts in the run after.
func (c *quiesceCall) Complete(success any, err error) {
	w := c.w
	w.mu.Lock()
	inFlight := w.dispatches
	w.quiescedRun = c.run
	w.mu.Unlock()
	w.rec.Add("run", "quiesce returned %v, err %v, %d dispatch batches in flight", success, err, inFlight)
	switch {
	case err != nil:
		w.violate("run %d: quiesce failed: %v", c.run, err)
	case inFlight > 0:
		w.violate("run %d: quiesce returned with %d dispatch batches in flight", c.run, inFlight)
	case c.waited:
		w.probe(ProbeRunQuiesceWaited)
	}
}

// stepDown ends the chain of the run that quiesced, as the step-down's terminate does (if that run
// continued as new meanwhile, its next run is the one terminated), and returns the input of the
// successor's run: a new owner's, which carries over from the ended chain through the real Backlog
// activity's scan (the source a takeover's run starts with, named with the model's run IDs).
func (w *RunWorld) stepDown() dispatcher.Input {
	ended := w.mirrorTerminate()
	w.mu.Lock()
	w.chainOwner = takeover.Owner{Project: Project, Queue: carryQueue, ServerID: "p2", Token: 3, PriorRunID: ended}
	w.steppedDown = true
	w.mu.Unlock()
	in := dispatcher.Input{Owner: w.owner(), MaxConcurrent: 1, BacklogPage: w.plan.pageMax}
	runID := w.mirrorStart("successor", in)
	in.Carry = &dispatcher.State{Backlog: []dispatcher.Source{{WorkflowID: w.id, RunID: ended, Scan: true, Chain: runID}}}
	w.rec.Add("world", "successor %s takes over from run %s", w.chainOwner.ServerID, short(ended))
	return in
}

// stepDownDue reports whether the run that just ended had quiesced and the successor is not there yet.
func (w *RunWorld) stepDownDue(run int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.quiescedRun == run && !w.steppedDown
}

// quiescedNow reports whether the current run's quiesce returned.
func (w *RunWorld) quiescedNow() bool { return w.quiescedRun != 0 && w.quiescedRun == w.runNo }

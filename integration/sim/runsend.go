package sim

import (
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/baton-run/baton/dispatcher"
)

// send is one attempt of a sender to hand a request to the chain's current run: a signal, or a
// Dispatch update with the request's key as its update ID (as dispatcher.Producer sends it).
type send struct {
	at     time.Time
	seq    int // orders sends of one instant
	req    dispatcher.Request
	update bool
	resend bool // an update sent again after its earlier run did not answer it
}

// updateKey is what the senders of one key's updates learnt.
type updateKey struct {
	sent      bool // an update for the key was sent
	answered  bool // one completed without an error
	continued bool // one was rejected because its run was continuing as new (ErrTypeContinuing)
}

// updateCall is one update attempt in one run: the UpdateCallbacks the environment calls.
type updateCall struct {
	w        *RunWorld
	run      int
	s        send
	draining bool // the run said it was draining or quiescing when the update was sent
	accepted bool
	done     bool
}

// drawSends draws the storm's sends: one per interval, a seeded share of them updates, and some
// sent a second time (a client's duplicate send, by signal or by update, with the same key) a little
// later.
func (w *RunWorld) drawSends(r *rand.Rand) {
	for i := 0; time.Duration(i)*w.plan.interval < w.plan.storm; i++ {
		at := w.start.Add(time.Duration(i) * w.plan.interval)
		req := carryRequest(1000 + i)
		w.sends = append(w.sends, send{at: at, req: req, update: r.Float64() < w.plan.updateShare})
		if r.Float64() < w.plan.dupShare {
			later := time.Duration(r.IntN(int(2*w.plan.interval/time.Millisecond))) * time.Millisecond
			w.sends = append(w.sends, send{at: at.Add(later), req: req, update: r.IntN(2) == 0})
		}
	}
	w.sortSends(0)
}

// sortSends orders the sends not sent yet, from index from on, by time, then sequence.
func (w *RunWorld) sortSends(from int) {
	for i := from; i < len(w.sends); i++ {
		if w.sends[i].seq == 0 {
			w.seq++
			w.sends[i].seq = w.seq
		}
	}
	slices.SortStableFunc(w.sends[from:], func(a, b send) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.seq - b.seq
	})
}

// resendDeferred queues, at the start of a run, the updates the previous run did not answer: each
// is sent again after the Producer's backoff (RetryMin to RetryMax, seeded).
func (w *RunWorld) resendDeferred(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range w.deferred {
		backoff := dispatcher.DefaultProducerRetryMin +
			time.Duration(w.sendR.Int64N(int64(dispatcher.DefaultProducerRetryMax-dispatcher.DefaultProducerRetryMin)))
		w.sends = append(w.sends, send{at: now.Add(backoff), req: s.req, update: true, resend: true})
	}
	w.deferred = nil
	w.sortSends(w.next)
}

// deliver sends s to the run of env. An update whose key was rejected in this run is sent again in
// the next one: the environment keeps a rejected update's ID and would never answer a second one,
// and the run would reject it again (a run that drains or quiesces does so until it ends).
func (w *RunWorld) deliver(env *testsuite.TestWorkflowEnvironment, s send) {
	key := s.req.Key()
	if !s.update {
		w.mu.Lock()
		w.sent[key] = true
		w.mu.Unlock()
		w.rec.Add("world", "signal %s", s.req.TaskID)
		w.mirrorSignal(s.req)
		env.SignalWorkflow(dispatcher.SignalDispatch, s.req)
		return
	}
	w.mu.Lock()
	u := w.updates[key]
	if u == nil {
		u = &updateKey{}
		w.updates[key] = u
	}
	u.sent = true
	rejected := w.rejected[key]
	if rejected {
		w.deferred = append(w.deferred, s)
	}
	w.mu.Unlock()
	if rejected {
		w.rec.Add("world", "update %s deferred to the next run (rejected in this one)", s.req.TaskID)
		return
	}
	w.mu.Lock()
	joins := w.inRun[key] // the same update ID again: it joins the first (if that one is accepted, so is this)
	w.inRun[key] = true
	w.mu.Unlock()
	c := &updateCall{w: w, run: w.runNo, s: s, draining: !joins && w.drainingNow(env)}
	w.mu.Lock()
	w.calls = append(w.calls, c)
	pending := w.runPending[key]
	w.mu.Unlock()
	w.rec.Add("world", "update %s (resend %v, pending in this run %v, draining %v)", s.req.TaskID, s.resend, pending, c.draining)
	env.UpdateWorkflow(dispatcher.UpdateDispatch, key, c, s.req)
}

// drainingNow asks the run (QueryProgress) whether it drains for continue-as-new or quiesces: its
// validator must then reject an update (neither state ends before the run does).
func (w *RunWorld) drainingNow(env *testsuite.TestWorkflowEnvironment) bool {
	v, err := env.QueryWorkflow(dispatcher.QueryProgress)
	if err != nil {
		return false
	}
	var p dispatcher.Progress
	if v.Get(&p) != nil {
		return false
	}
	return p.Draining || p.Quiescing
}

// Accept: the run accepted the update; its request is the run's from here.
func (c *updateCall) Accept() {
	w := c.w
	w.mu.Lock()
	c.accepted = true
	w.sent[c.s.req.Key()] = true
	w.mu.Unlock()
	w.rec.Add("run", "update %s accepted", c.s.req.TaskID)
	w.mirrorUpdate(c.s.req)
	if c.draining {
		w.violate("update %s accepted by run %d while the run said it was draining or quiescing", c.s.req.TaskID, c.run)
	}
}

// Reject: a run that continues as new or hands over rejects the update; the Producer sends it
// again, which reaches the next run.
func (c *updateCall) Reject(err error) {
	w := c.w
	var app *temporal.ApplicationError
	typ := ""
	if errors.As(err, &app) {
		typ = app.Type()
	}
	w.rec.Add("run", "update %s rejected: %s", c.s.req.TaskID, typ)
	w.mu.Lock()
	c.done = true
	key := c.s.req.Key()
	w.rejected[key] = true
	if typ == dispatcher.ErrTypeContinuing {
		w.updates[key].continued = true
	}
	w.deferred = append(w.deferred, c.s)
	w.mu.Unlock()
	if typ != dispatcher.ErrTypeContinuing && typ != dispatcher.ErrTypeHandingOver {
		w.violate("update %s rejected by run %d: %v", c.s.req.TaskID, c.run, err)
	}
}

// Complete: the update's outcome. A success must come after the request was recorded handled; a
// run cancelled under it leaves the update to be sent again to the next run.
func (c *updateCall) Complete(success any, err error) {
	w := c.w
	key := c.s.req.Key()
	w.mu.Lock()
	c.done = true
	done, n := w.ledger[key], w.handled[key]
	u := w.updates[key]
	pending := w.runPending[key] && c.s.resend
	if err == nil {
		u.answered = true
	} else if temporal.IsCanceledError(err) {
		w.deferred = append(w.deferred, c.s)
	}
	w.mu.Unlock()
	res, _ := success.(dispatcher.Result)
	w.rec.Add("run", "update %s completed: duplicate %v, err %v", c.s.req.TaskID, res.Duplicate, err)
	switch {
	case err != nil && !temporal.IsCanceledError(err):
		w.violate("update %s failed in run %d: %v", c.s.req.TaskID, c.run, err)
	case err != nil:
	case !done || n != 1:
		w.violate("update %s answered in run %d (duplicate %v) with the key done %v, handled %d times", c.s.req.TaskID,
			c.run, res.Duplicate, done, n)
	default:
		if u.continued && c.s.resend {
			w.probe(ProbeRunUpdateResent)
		}
		if pending {
			w.probe(ProbeRunPendingJoined)
		}
	}
}

// endRun settles the updates of a run that ended: one it accepted and did not answer is an error a
// Producer sees and sends again (AcceptedUpdateCompletedWorkflow), as is one it never processed (the
// server aborts it); a run continued as new must not leave an accepted update unanswered (it waits
// for them: the workflow's quiet).
func (w *RunWorld) endRun(run int, continued bool) {
	w.mu.Lock()
	var unanswered []string
	for _, c := range w.calls {
		if c.done {
			continue
		}
		if c.accepted {
			unanswered = append(unanswered, c.s.req.TaskID)
		}
		w.deferred = append(w.deferred, c.s)
	}
	w.calls = nil
	w.rejected, w.inRun = map[string]bool{}, map[string]bool{}
	w.mu.Unlock()
	if continued && len(unanswered) > 0 {
		w.violate("run %d continued as new with %d accepted updates not answered: %v", run, len(unanswered), unanswered)
	}
}

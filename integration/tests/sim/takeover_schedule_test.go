package sim_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/integration/sim"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/takeover"
)

// plan is a schedule drawn from its seed: for each of 1-3 queues, terms handed from process to
// process (tokens increase across all queues, as etcd revisions do), the faults, out-of-band closes,
// the heal and the checks.
type plan struct {
	procs  int
	queues int
	terms  []plannedTerm
	rates  faultRates
	pauseP float64
	// unavailP: how often etcd does not answer a term's Confirm before the heal.
	unavailP float64
	oob      []plannedClose
	heal     time.Duration
	// mode is the fleet's start mode: a seed in four runs signal-with-start.
	mode takeover.StartMode
	// runLog: the Managers log their runs in a real EtcdRunLog on the etcd model (a seed in two);
	// logRates are its requests' faults.
	runLog   bool
	logRates faultRates
}

type plannedTerm struct {
	proc  int
	queue int
	// prev is the index of the queue's previous term, or -1.
	prev  int
	token int64
	at    time.Duration
	// lag is how long after etcd granted the next term this term's process goes on believing it
	// holds (a stalled process); Confirm tells it the truth meanwhile.
	lag time.Duration
	// graceful: the term ends with a step-down (its loop stopped, its own chain terminated by
	// FirstExecutionRunId while the term holds), not a loss.
	graceful bool
}

type plannedClose struct {
	queue  int
	at     time.Duration
	action string // terminate, cancel, complete, fail, can
}

func drawPlan(seed uint64) plan {
	r := stream(seed, "plan")
	p := plan{procs: 2 + r.IntN(3), rates: drawRates(stream(seed, "rates"))}
	if rl := stream(seed, "runlog"); rl.IntN(2) == 0 {
		p.runLog, p.logRates = true, drawRates(rl)
	}
	if r.IntN(2) == 0 {
		p.pauseP = 0.1 + 0.4*r.Float64()
	}
	if r.IntN(4) == 0 {
		p.mode = takeover.StartSignalWithStart
	}
	if r.IntN(2) == 0 {
		p.unavailP = 0.05 + 0.25*r.Float64()
	}
	p.queues = 1 + r.IntN(3)
	// jitter keeps the world's own events off the instants of the processes' timers.
	jitter := func() time.Duration { return time.Duration(r.Int64N(int64(time.Millisecond))) }
	for q := range p.queues {
		at := time.Duration(0)
		for range 2 + r.IntN(4) {
			pt := plannedTerm{proc: r.IntN(p.procs), queue: q, at: at + jitter()}
			switch r.IntN(3) {
			case 0:
				pt.lag = time.Duration(r.Int64N(int64(6 * time.Second)))
			case 1:
				pt.graceful = true
			}
			p.terms = append(p.terms, pt)
			at += time.Duration(200+r.IntN(20000)) * time.Millisecond
		}
	}
	sort.SliceStable(p.terms, func(i, j int) bool { return p.terms[i].at < p.terms[j].at })
	last, token, prev := time.Duration(0), int64(100), map[int]int{}
	for i := range p.terms {
		pt := &p.terms[i]
		pt.token, pt.prev = token, -1
		token += 1 + int64(r.IntN(20))
		if j, ok := prev[pt.queue]; ok {
			pt.prev = j
			if pt.proc == p.terms[j].proc {
				pt.proc = (pt.proc + 1) % p.procs // a queue changes process with each term
			}
		}
		prev[pt.queue], last = i, max(last, pt.at)
	}
	actions := []string{"terminate", "cancel", "complete", "fail", "can", "can"}
	for range r.IntN(4) {
		p.oob = append(p.oob, plannedClose{queue: r.IntN(p.queues), at: time.Duration(r.Int64N(int64(last+10*time.Second))) + jitter(),
			action: actions[r.IntN(len(actions))]})
	}
	sort.Slice(p.oob, func(i, j int) bool { return p.oob[i].at < p.oob[j].at })
	p.heal = last + 15*time.Second + jitter()
	return p
}

// The checks after the heal: by then every delayed request has landed and the last owner has had
// time to replace what the faults left; the second check proves the state stays.
const (
	firstCheck  = 60 * time.Second
	secondCheck = 90 * time.Second
)

// takeoverSchedule runs one seed's schedule with real takeover.Managers over the model. Call it
// inside a synctest bubble.
func takeoverSchedule(t *testing.T, seed uint64, verbose bool) sim.Result {
	p := drawPlan(seed)
	w := newWorld(seed, p.queues)
	w.logf("world", "plan: %d queues, %d processes, start mode %d, terms %v, faults %+v, pauses %.2f, etcd unavailable %.2f, out-of-band %v, heal at %v, run log %v (faults %+v)",
		p.queues, p.procs, p.mode, p.terms, p.rates, p.pauseP, p.unavailP, p.oob, p.heal, p.runLog, p.logRates)
	if p.runLog {
		w.newRunLogModel(p.logRates)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	terms := make([]*term, len(p.terms))
	events := w.events(p)
	for _, ev := range events {
		time.Sleep(ev.at - time.Since(w.start))
		// Whatever else woke at this instant runs to a stop before the world acts, and what the
		// world's act wakes runs to a stop after it: the trace does not depend on the Go scheduler.
		synctest.Wait()
		switch {
		case ev.term >= 0:
			terms[ev.term] = w.grant(ctx, t, p, ev.term, terms, &wg, verbose)
		case ev.close != "":
			w.closeOutOfBand(ev.queue, ev.close)
		case ev.name == "heal":
			w.mu.Lock()
			w.healed = true
			w.mu.Unlock()
			w.logf("world", "healed: faults off")
		default:
			for q := range p.queues {
				w.checkOwner(lastOf(p, terms, q), ev.name)
			}
		}
		synctest.Wait()
	}
	cancel()
	for _, tm := range terms {
		tm.cancel(errTermEnded)
	}
	wg.Wait()
	// Let every request still in the network land (its checks still count).
	time.Sleep(2*p.rates.maxDelay + time.Second)
	res := w.result()
	res.Setup = fmt.Sprintf("%d queues, %d processes, %d terms, %d out-of-band closes, run log %v", p.queues, p.procs, len(p.terms), len(p.oob), p.runLog)
	return res
}

type event struct {
	at    time.Duration
	term  int
	queue int
	close string
	name  string
}

// lastOf is queue q's last term.
func lastOf(p plan, terms []*term, q int) *term {
	var last *term
	for i, pt := range p.terms {
		if pt.queue == q {
			last = terms[i]
		}
	}
	return last
}

func (w *world) events(p plan) []event {
	var evs []event
	for i, pt := range p.terms {
		evs = append(evs, event{at: pt.at, term: i})
	}
	for _, c := range p.oob {
		if c.at < p.heal {
			evs = append(evs, event{at: c.at, term: -1, queue: c.queue, close: c.action})
		}
	}
	evs = append(evs, event{at: p.heal, term: -1, name: "heal"},
		event{at: p.heal + firstCheck, term: -1, name: "first check"},
		event{at: p.heal + secondCheck, term: -1, name: "second check"})
	sort.SliceStable(evs, func(i, j int) bool { return evs[i].at < evs[j].at })
	return evs
}

// grant hands term i's queue to it: the queue's previous term's process is told first (or, with a
// lag, later: etcd moves on regardless), then etcd holds the new token, then the new owner's loop
// starts.
func (w *world) grant(ctx context.Context, t *testing.T, p plan, i int, terms []*term, wg *sync.WaitGroup, verbose bool) *term {
	pt := p.terms[i]
	if pt.prev >= 0 {
		prev := terms[pt.prev]
		if p.terms[pt.prev].graceful {
			w.stepDown(prev)
		}
		if lag := p.terms[pt.prev].lag; lag > 0 {
			time.AfterFunc(lag, func() { prev.cancel(errTermEnded) })
		} else {
			prev.cancel(errTermEnded)
			// The process that lost its term reacts before etcd grants the next one.
			synctest.Wait()
		}
	}
	tctx, tcancel := context.WithCancelCause(ctx)
	tm := &term{w: w, proc: pt.proc, queue: pt.queue, token: pt.token, started: time.Now(), ctx: tctx, cancel: tcancel,
		pauses: stream(w.seed, fmt.Sprintf("pause/%d", pt.token)), pauseP: p.pauseP, unavailP: p.unavailP}
	w.mu.Lock()
	w.holder[pt.queue] = pt.token
	w.mu.Unlock()
	w.logf(tm.who(), "term of queue %s granted (lag when it ends: %v, graceful: %v)", tm.Queue(), pt.lag, pt.graceful)
	log := zap.NewNop()
	if verbose {
		log = zaptest.NewLogger(t).Named(tm.who())
	}
	cli := temporalmodel.NewClient(w.model, tm.who(), w.sender(tm.who(), tm.token, stream(w.seed, "net/"+tm.who()), p.rates))
	rl, err := w.runLogFor(ctx, tm)
	if err != nil {
		t.Fatal(err)
	}
	mgr, err := takeover.New(cli, takeover.Config{Clock: sim.Streams{Seed: w.seed}.NewClock("jitter/" + tm.who()), Logger: log, Mode: p.mode,
		RunLog: rl})
	if err != nil {
		t.Fatal(err)
	}
	tm.mgr, tm.done = mgr, make(chan struct{})
	tm.loop, tm.stopLoop = context.WithCancel(tctx)
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(tm.done)
		w.own(tm, mgr)
	}()
	return tm
}

// own is the owner's loop for one term, as a Node runs it: take over, watch, follow
// continue-as-new, replace a run that closed, until the term ends.
func (w *world) own(tm *term, mgr *takeover.Manager) {
	run, ok := w.take(tm, mgr.Take)
	for ok {
		w.mu.Lock()
		w.runs[tm.token] = run
		w.mu.Unlock()
		next, err := mgr.Watch(tm.loop, tm, run)
		switch {
		case tm.loop.Err() != nil:
			return
		case err == nil:
			w.logf(tm.who(), "watch: chain continued as %s", short(next.RunID))
			run = next
		case errors.Is(err, takeover.ErrRunClosed):
			w.logf(tm.who(), "watch: %v; replacing", err)
			run, ok = w.take(tm, mgr.Replace)
		default:
			w.logf(tm.who(), "watch ended: %v", err)
			return
		}
	}
}

func (w *world) take(tm *term, f func(context.Context, takeover.Term) (takeover.Run, error)) (takeover.Run, bool) {
	for {
		run, err := f(tm.loop, tm)
		if err == nil {
			w.logf(tm.who(), "took over: run %s (path %s, %d attempts)", short(run.RunID), run.Path, run.Attempts)
			if tm.ctx.Err() != nil {
				w.violate(tm.who(), "the takeover reported run %s for a term that had ended", short(run.RunID))
			}
			return run, true
		}
		w.logf(tm.who(), "takeover failed: %v", err)
		if errors.Is(err, takeover.ErrPermanent) {
			w.violate(tm.who(), "a permanent takeover failure in a world without one: %v", err)
			return run, false
		}
		if tm.loop.Err() != nil || errors.Is(err, takeover.ErrSuperseded) {
			return run, false
		}
		select {
		case <-tm.loop.Done():
			return run, false
		case <-time.After(time.Second):
		}
	}
}

// closeOutOfBand is an operator's (or the workflow's own) close of the open run.
func (w *world) closeOutOfBand(q int, action string) {
	var runID string
	var err error
	id := w.wfIDs[q]
	switch action {
	case "terminate":
		runID, err = w.model.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "operator")
	case "cancel":
		runID, err = w.model.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, "")
	case "complete":
		runID, err = w.model.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, "")
	case "fail":
		runID, err = w.model.Close(id, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, "workflow failed")
	case "can":
		runID = w.model.ContinueAsNew(id)
	}
	w.logf("world", "out-of-band %s of %s: run %s %v", action, id, short(runID), err)
}

// checkOwner holds the liveness invariant after the heal: the open run is the last owner's, the
// one its loop follows, with the owner's token in its memo.
func (w *world) checkOwner(last *term, name string) {
	open, ok := w.model.Open(w.wfIDs[last.queue])
	w.mu.Lock()
	defer w.mu.Unlock()
	following := w.runs[last.token].RunID
	switch {
	case !ok:
		w.violateLocked("world", "%s: no open run; the owner (token %d) follows %s", name, last.token, short(following))
	case open.RunID != following:
		w.violateLocked("world", "%s: open run %s (token %d) is not the one the owner (token %d) follows, %s",
			name, short(open.RunID), w.tokenOf(open), last.token, short(following))
	case w.tokenOf(open) != last.token:
		w.violateLocked("world", "%s: open run %s carries token %d, the owner's is %d", name, short(open.RunID), w.tokenOf(open), last.token)
	default:
		w.logLocked("world", "%s: run %s is the owner's (token %d)", name, short(open.RunID), last.token)
	}
}

// stepDown is a graceful end of tm, as a Node's stop makes it: the owner loop is stopped and waited
// for, then the term, still held, terminates its own chain (Manager.StepDown, by FirstExecutionRunId).
// The term's hand-over budget bounds it; a request still in the network lands when it lands.
func (w *world) stepDown(tm *term) {
	tm.stopLoop()
	<-tm.done
	w.mu.Lock()
	run, ok := w.runs[tm.token]
	w.steppingDown[tm.token] = true // the loop has returned: what the Manager logs now, StepDown logs
	w.mu.Unlock()
	if !ok {
		w.logf(tm.who(), "step-down: no run taken over")
		return
	}
	ctx, cancel := context.WithTimeout(tm.ctx, 10*time.Second)
	defer cancel()
	err := tm.mgr.StepDown(ctx, tm, run)
	w.logf(tm.who(), "step-down of chain %s (current run %s): %v", short(run.FirstRunID), short(run.RunID), err)
}

package sim

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/converter"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/takeover"
)

// The probes a dispatcher-run batch must hit.
const (
	ProbeRunPageCarried = "continue-as-new that carried a page"
	ProbeRunDueInFlight = "continue-as-new due with a backlog page in flight"
	ProbeRunPageRetried = "backlog page retried"
	// ProbeRunUpdateResent: an update rejected because its run was continuing as new, sent again
	// and answered by a later run.
	ProbeRunUpdateResent = "update rejected while draining, resent and answered"
	// ProbeRunPendingJoined: an update sent again to a run whose input carried its request in
	// Pending (the earlier run queued it, from a duplicate send, and rejected the update while
	// draining) joined that request and was answered.
	ProbeRunPendingJoined = "resent update joined a request carried in Pending"
	// ProbeRunQuiesceWaited: the owner's quiesce was sent with a dispatch in flight, and returned.
	ProbeRunQuiesceWaited = "quiesce waited for a dispatch in flight"
)

// RunProbes are the probes of the dispatcher-run batch.
var RunProbes = []string{ProbeRunPageCarried, ProbeRunDueInFlight, ProbeRunPageRetried, ProbeRunUpdateResent,
	ProbeRunPendingJoined, ProbeRunQuiesceWaited}

// Bounds of the dispatcher-run world, in simulated time from the chain's start.
const (
	// runProgressBound is how long the requests read back from the prior run may wait while
	// arrivals keep continue-as-new due: a page is slower than that only if it was never applied.
	runProgressBound = time.Minute
	// runHealBound is how long after the storm every request must be handled.
	runHealBound = time.Minute
	// runMaxRuns bounds a chain's runs in one schedule.
	runMaxRuns = 2000
)

// RunWorld is one schedule of the dispatcher-run simulator: the real dispatcher workflow code (the
// reference Workflow, registered by dispatcher.RegisterWithOptions) in the SDK's TestWorkflowEnvironment,
// one environment per run of a chain, each next run started with the input of the previous one's
// ContinueAsNewError. The chain's first run carries over a closed prior run's backlog (its history in
// the Temporal model, read by the real Backlog activity page by page), while a storm of signals makes
// Temporal suggest continue-as-new in every run after a few arrivals (SetContinueAsNewSuggested), and
// each Backlog page fails a seeded number of attempts first, so it returns later than the suggestion:
// a run due for continue-as-new with a page in flight. The Dispatch activities are the real ones over
// an in-memory ledger (pure logic here; the ledger world covers the real one); one batch in five
// fails a seeded number of attempts first, so a run drains for a while with a dispatch in flight.
//
// The storm's requests arrive as signals and as Dispatch updates (the key as the update ID), some
// sent twice by either path, from senders that behave like dispatcher.Producer: an update the
// validator rejects (ErrTypeContinuing, ErrTypeHandingOver), one a cancelled run failed, and one a
// run ended without answering, is sent again to the next run, after the Producer's backoff.
//
// In half of the seeds the owner steps down mid-storm: its quiesce update (takeover.UpdateQuiesce)
// is sent once a dispatch is in flight, and a seeded gap after it returned the run ends (the
// environment cancels it; a step-down terminates it). A new owner's run then carries over from the
// ended chain's histories through the real Backlog activity and its scan; the environment keeps no
// history, so the world mirrors each run's into the Temporal model as it happens (runmirror.go).
//
// The oracles: during the storm every request read back from the prior run is handled within
// runProgressBound (the carry-over is not starved by continue-as-new); after the storm every
// request, carried, signalled or accepted by update, is handled within runHealBound, and every
// update sent was answered; the handler runs once per request; an update answered without an error
// finds its key recorded done; no update is accepted by a run that said (QueryProgress) it was
// draining or quiescing; no run continues as new with an accepted update unanswered; a quiesce
// returns with no dispatch in flight, and its run starts none after it.
//
// Time is the testsuite's mock clock, which the environment advances when its workflow and
// activities are idle (see RunDispatcherRun for why not a synctest bubble's). Activities of one
// instant run on goroutines of their own, so the order of their trace lines within that instant
// may differ between two runs of a seed.
type RunWorld struct {
	stage
	t     *testing.T
	plan  runPlan
	tm    *temporalmodel.Model
	acts  *dispatcher.Activities
	id    string
	start time.Time // the chain's start (mock time)

	mu      sync.Mutex
	carried map[string]bool // keys read back from the prior run
	sent    map[string]bool // keys signalled, or whose update a run accepted
	handled map[string]int  // handler runs per key
	ledger  map[string]bool // key -> done

	sendR      *rand.Rand
	sends      []send // every send, in time order; the tail from next on is still to be sent
	next       int    // the next send
	seq        int
	updates    map[string]*updateKey
	calls      []*updateCall   // the current run's update attempts
	rejected   map[string]bool // keys whose update the current run rejected
	inRun      map[string]bool // keys whose update was sent to the current run
	deferred   []send          // updates to send again to the next run
	runNo      int
	runPending map[string]bool  // the keys the current run's input carried in Pending
	dispatches int              // DispatchBatch activities in flight (first attempt begun, not returned)
	scheduled  map[string]int64 // the mirror's scheduled event of the batch in flight, by its first key

	modelRun    string         // the model's open run, where the mirror writes (see runmirror.go)
	quiesceSent bool           // the step-down's quiesce was sent
	quiescedRun int            // the run whose quiesce returned
	steppedDown bool           // the successor took over
	chainOwner  takeover.Owner // the owner of the current chain once a successor took over

	inFlight   bool             // a Backlog page was asked for and not read yet
	chainInput dispatcher.Input // the first run's
	clk        *mockClock
}

// runPlan is what a seed draws for the dispatcher-run world.
type runPlan struct {
	carried      int           // requests the prior run left
	pageMax      int           // BacklogPage
	storm        time.Duration // how long signals arrive
	interval     time.Duration // between two arrivals
	suggestAfter int           // arrivals in a run before Temporal suggests continue-as-new
	slowAttempts int           // failed attempts of every page before it is read
	updateShare  float64       // of the sends, the share sent as updates
	dupShare     float64       // of the requests, the share sent twice
	slowDispatch int           // at most this many failed attempts of a DispatchBatch before it runs
	quiesceAt    time.Duration // when the owner steps down (quiesce, then the run ends); 0: never
	stepDownGap  time.Duration // from the quiesce's return to the end of the run
}

func (p runPlan) String() string {
	return fmt.Sprintf("carried=%d page=%d storm=%v interval=%v suggest-after=%d slow-attempts=%d updates=%.2f dups=%.2f slow-dispatch=%d quiesce-at=%v gap=%v",
		p.carried, p.pageMax, p.storm, p.interval, p.suggestAfter, p.slowAttempts, p.updateShare, p.dupShare, p.slowDispatch,
		p.quiesceAt, p.stepDownGap)
}

func drawRunPlan(r *rand.Rand) runPlan {
	p := runPlan{carried: 2 + r.IntN(5), pageMax: 1 + r.IntN(4), storm: time.Duration(70+r.IntN(40)) * time.Second,
		interval: time.Duration(200+r.IntN(800)) * time.Millisecond, suggestAfter: 1 + r.IntN(4), slowAttempts: r.IntN(4),
		updateShare: 0.2 + 0.6*r.Float64(), dupShare: 0.1 + 0.3*r.Float64(), slowDispatch: r.IntN(4)}
	if r.IntN(2) == 0 {
		p.quiesceAt = p.storm * time.Duration(30+r.IntN(40)) / 100
		p.stepDownGap = time.Duration(50+r.IntN(2000)) * time.Millisecond
	}
	return p
}

// RunDispatcherRun runs one schedule of the dispatcher-run world. It runs outside a synctest
// bubble, on the testsuite's mock clock: the environment leaves the goroutine of an activity retry
// that its run abandoned (continued as new, or was cancelled, before the retry) blocked for good,
// which a bubble reports as a deadlock when the schedule ends.
func RunDispatcherRun(t *testing.T, seed uint64, keep bool) Result {
	s := Streams{Seed: seed}
	w := &RunWorld{t: t, plan: drawRunPlan(s.Rand("plan")), carried: map[string]bool{},
		sent: map[string]bool{}, handled: map[string]int{}, ledger: map[string]bool{}, updates: map[string]*updateKey{},
		rejected: map[string]bool{}, inRun: map[string]bool{}, scheduled: map[string]int64{}, runPending: map[string]bool{}, sendR: s.Rand("sends")}
	w.s, w.probes = s, map[string]int{}
	w.start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	w.clk = &mockClock{w: w}
	w.rec = NewRecorder(w.clk, keep)
	w.rec.Add("world", "setup %s", w.plan)
	w.setUp()
	end := w.chain()
	w.check(end)
	w.checkUpdates()
	return Result{Seed: seed, Violations: w.violations, Hash: w.rec.Hash(), Simulated: end.Sub(w.start),
		Probes: w.probes, Timeline: w.rec.Timeline(), Setup: w.plan.String()}
}

// mockClock stamps the trace with the running environment's mock time.
type mockClock struct {
	clock.Clock
	w   *RunWorld
	mu  sync.Mutex
	now time.Time
}

func (c *mockClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.now.IsZero() {
		return c.w.start
	}
	return c.now
}

func (c *mockClock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// setUp writes the prior run's history in the Temporal model and draws the storm's arrivals.
func (w *RunWorld) setUp() {
	w.tm = temporalmodel.New(temporalmodel.Options{Clock: &modelClock{Clock: clock.Real(), w: w}})
	var err error
	if w.id, err = takeover.WorkflowID(Project, carryQueue); err != nil {
		w.t.Fatal(err)
	}
	dc := converter.GetDefaultDataConverter()
	prior := takeover.Owner{Project: Project, Queue: carryQueue, ServerID: "p0", Token: 1}
	in, _ := dc.ToPayloads(dispatcher.Input{Owner: prior, Carry: &dispatcher.State{Owner: prior}})
	resp, err := w.tm.Start(temporalmodel.StartRequest{WorkflowID: w.id, RequestID: "prior", WorkflowType: dispatcher.WorkflowName, Input: in})
	if err != nil {
		w.t.Fatal(err)
	}
	for i := range w.plan.carried {
		r := carryRequest(i)
		w.carried[r.Key()] = true
		p, _ := dc.ToPayloads(r)
		if _, err := w.tm.Append(w.id, resp.RunID, signalEvent(p)); err != nil {
			w.t.Fatal(err)
		}
	}
	if err := w.tm.Terminate(temporalmodel.TerminateRequest{WorkflowID: w.id, RunID: resp.RunID, Reason: "takeover"}); err != nil {
		w.t.Fatal(err)
	}
	w.acts = &dispatcher.Activities{History: temporalmodel.NewClient(w.tm, "run", nil), Ledger: w, Handler: w.handle}
	w.drawSends(w.sendR)
	w.chainInput = dispatcher.Input{Owner: w.owner(), MaxConcurrent: 1, BacklogPage: w.plan.pageMax,
		Carry: &dispatcher.State{Backlog: []dispatcher.Source{{WorkflowID: w.id, RunID: resp.RunID}}}}
}

package sim

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/takeover"
)

// The probes a carry batch must hit.
const (
	ProbeCarryLateStart = "late start landed while no run was open"
	ProbeCarryLagged    = "carry-over page read while visibility lagged"
	ProbeCarryRetried   = "carry-over page failed and was retried"
	ProbeCarryChain     = "continue-as-new chain read by a carry-over"
	ProbeCarryHidden    = "late start named as the prior with an uncarried run before it"
)

// CarryProbes are the probes of the carry batch.
var CarryProbes = []string{ProbeCarryLateStart, ProbeCarryLagged, ProbeCarryRetried, ProbeCarryChain, ProbeCarryHidden}

// carryQueue is the simulated queue whose dispatcher workflow ID the carry world scripts.
const carryQueue = "q"

// carryHealBound is how long, in simulated time, the last run's carry-over may take after the heal:
// visibility's lag is over long before, so a carry-over still failing then is wedged.
const carryHealBound = 30 * time.Minute

// CarryWorld is one schedule of the carry-over simulator: the real dispatcher Backlog activity (its
// scan: the run log, describes, continue-as-new links, visibility, each run's history) against the
// Temporal model and a real takeover.EtcdRunLog over the etcd model. The dispatcher runs themselves
// are scripted, from the seed, as the dispatcher workflow writes its history: each run accepts
// requests (signals, accepted updates), reads its predecessors' backlog page by page with the real
// activity, dispatches some (activities scheduled and completed, or terminated mid-activity), and
// continues as new carrying what waits. Takeovers terminate the prior run by run ID and log it, a
// superseded term's start lands late while no run is open and is ended at once by its starter, an
// operator ends runs, visibility lags (a row missing, a closed run still RUNNING), history and
// visibility reads fail. After the heal a last takeover's run reads its whole backlog.
//
// The oracle: every request a run accepted is, at the end, seen through by a Dispatch activity of
// some run (the last one's carry-over included): none lost. A failed page is retried, never
// skipped; a carry-over that does not finish within carryHealBound after the heal is wedged.
type CarryWorld struct {
	stage
	t     *testing.T
	plan  carryPlan
	ctx   context.Context
	tm    *temporalmodel.Model
	id    string // the workflow ID
	rng   string // the run log's range
	rlog  *takeover.EtcdRunLog
	acts  *dispatcher.Activities
	env   *testsuite.TestActivityEnvironment
	dc    converter.DataConverter
	runR  *rand.Rand
	token int64
	runs  []string // every run started, oldest first

	accepted  map[string]string // dispatch key -> the run that accepted it first
	completed map[string]bool   // dispatch keys a Dispatch activity saw through
	nextTask  int
	open      *carryRun // the run the world is scripting, while open
	lateRuns  []string  // the late starts
	faultsOff bool      // healed
}

// RunCarry runs one schedule of the carry-over world.
func RunCarry(t *testing.T, seed uint64, keep bool) Result {
	return runInBubble(t, seed, keep, runCarry)
}

func runCarry(t *testing.T, seed uint64, keep bool) Result {
	start := time.Now()
	s := Streams{Seed: seed}
	w := &CarryWorld{t: t, plan: drawCarryPlan(s.Rand("plan")), accepted: map[string]string{},
		completed: map[string]bool{}, dc: converter.GetDefaultDataConverter(), runR: s.Rand("run")}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w.ctx = ctx
	w.setUp(s, keep)
	for _, e := range w.plan.epochs {
		w.epoch(e)
	}
	w.heal()
	w.check()
	return w.result(seed, start, w.plan)
}

// setUp builds the models, the run log and the real Backlog activity in its test environment.
func (w *CarryWorld) setUp(s Streams, keep bool) {
	w.s, w.probes = s, map[string]int{}
	w.rec = NewRecorder(clock.Real(), keep)
	w.model = etcdmodel.New(etcdmodel.Options{Rand: s.Source("leases")})
	lagR := s.Rand("lag")
	w.tm = temporalmodel.New(temporalmodel.Options{Clock: s.NewClock("temporal"),
		VisibilityLag: func(closing bool) time.Duration { return w.visibilityLag(lagR, closing) }})
	var err error
	if w.rlog, err = takeover.NewEtcdRunLog(w.model.NewClient(w.ctx, "runlog"), ""); err != nil {
		w.t.Fatal(err)
	}
	if w.id, err = takeover.WorkflowID(Project, carryQueue); err != nil {
		w.t.Fatal(err)
	}
	w.rng = takeover.RunLogRange("", Project, carryQueue)
	hist := &faultyHistory{c: temporalmodel.NewClient(w.tm, "carry", nil), w: w, r: s.Rand("faults")}
	w.acts = &dispatcher.Activities{History: hist, RunLog: w.rlog}
	if w.plan.logDenied {
		w.acts.RunLog = deniedRunLog{}
	}
	var suite testsuite.WorkflowTestSuite
	suite.SetLogger(log.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	w.env = suite.NewTestActivityEnvironment()
	w.env.RegisterActivityWithOptions(w.acts.Backlog, activity.RegisterOptions{Name: dispatcher.ActivityBacklog})
	w.rec.Add("world", "setup %s", w.plan)
}

// epoch plays one step of the plan.
func (w *CarryWorld) epoch(e carryEpoch) {
	w.sleep(time.Duration(1+w.runR.IntN(30)) * time.Second)
	switch e {
	case epochTakeover:
		w.takeover(false)
	case epochClose:
		w.closeOpen("operator")
	case epochLate:
		w.lateStart()
	}
}

// sleep lets simulated time pass (the bubble's clock).
func (w *CarryWorld) sleep(d time.Duration) { time.Sleep(d) }

// owner is the Owner of a run started by a takeover of token tok naming prior.
func (w *CarryWorld) owner(tok int64, prior string) takeover.Owner {
	return takeover.Owner{Project: Project, Queue: carryQueue, ServerID: fmt.Sprintf("p%d", tok), Token: tok,
		PriorRunID: prior, RunLog: w.rng}
}

// logRun records a chain in the run log, as a takeover does before it reports or ends a run.
func (w *CarryWorld) logRun(first, last string, by takeover.Owner) {
	if w.plan.logDenied {
		return // the role predates the log: the takeover logs nothing and says so
	}
	if err := w.rlog.Record(w.ctx, w.rng, takeover.LoggedRun{RunID: first, Last: last, ServerID: by.ServerID, Token: by.Token}); err != nil {
		w.t.Fatalf("run log: %v", err)
	}
}

// start starts a run with the takeover's input (FAIL conflict policy, ALLOW_DUPLICATE reuse).
func (w *CarryWorld) start(o takeover.Owner) string {
	w.sleep(time.Millisecond) // a round trip after whatever came before: no two runs start at one instant
	in, err := w.dc.ToPayloads(dispatcher.Input{Owner: o})
	if err != nil {
		w.t.Fatal(err)
	}
	memo, err := w.dc.ToPayload(o)
	if err != nil {
		w.t.Fatal(err)
	}
	resp, err := w.tm.Start(temporalmodel.StartRequest{WorkflowID: w.id, RequestID: fmt.Sprintf("start-%d", len(w.runs)),
		WorkflowType: dispatcher.WorkflowName, TaskQueue: "baton", Input: in,
		Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{takeover.MemoKey: memo}}})
	if err != nil {
		w.t.Fatalf("start: %v", err)
	}
	w.runs = append(w.runs, resp.RunID)
	return resp.RunID
}

// latest is the workflow ID's latest run (a takeover's describe), open or not.
func (w *CarryWorld) latest() (temporalmodel.Run, bool) {
	rs := w.tm.Runs(w.id)
	if len(rs) == 0 {
		return temporalmodel.Run{}, false
	}
	return rs[len(rs)-1], true
}

// takeover describes the ID, terminates an open prior run by its run ID (logging its chain first),
// starts and logs a new run naming the prior, and plays it. heal makes it the last one: its
// carry-over runs to the end.
func (w *CarryWorld) takeover(heal bool) {
	w.token++
	prior := ""
	if r, ok := w.latest(); ok {
		prior = r.RunID
		if r.Open() {
			w.logRun(r.FirstRunID, r.RunID, w.owner(w.token, ""))
			if err := w.tm.Terminate(temporalmodel.TerminateRequest{WorkflowID: w.id, RunID: r.RunID, Reason: "takeover"}); err != nil {
				w.t.Fatalf("terminate: %v", err)
			}
			w.endOpen("terminated by the takeover")
		}
		if slices.Contains(w.lateRuns, prior) && w.uncarried() {
			w.probe(ProbeCarryHidden)
		}
	}
	o := w.owner(w.token, prior)
	runID := w.start(o)
	w.logRun(runID, runID, o)
	w.rec.Add(o.ServerID, "takeover: started %s naming prior %q", short(runID), short(prior))
	w.open = &carryRun{id: runID, owner: o, backlog: w.startSources(runID, o)}
	if heal {
		w.carryAll()
		return
	}
	w.live()
}

// lateStart lands a superseded term's start while no run is open: its takeover looked earlier and
// named an older run as prior. The start is logged, then ended at once by its starter.
func (w *CarryWorld) lateStart() {
	if w.open != nil {
		w.closeOpen("step-down")
	}
	prior := ""
	if n := len(w.runs); n > 1 {
		prior = w.runs[w.runR.IntN(n-1)] // older than the latest
	}
	o := w.owner(max(1, w.token-1), prior)
	o.ServerID = fmt.Sprintf("p%d-late", o.Token)
	runID := w.start(o)
	w.lateRuns = append(w.lateRuns, runID)
	w.probe(ProbeCarryLateStart)
	w.logRun(runID, runID, o)
	if err := w.tm.Terminate(temporalmodel.TerminateRequest{WorkflowID: w.id, RunID: runID, Reason: "late start"}); err != nil {
		w.t.Fatalf("terminate the late start: %v", err)
	}
	w.rec.Add(o.ServerID, "late start %s naming prior %q, ended at once", short(runID), short(prior))
}

// closeOpen ends the open run out of band (an operator, or its owner stepping down).
func (w *CarryWorld) closeOpen(why string) {
	if w.open == nil {
		return
	}
	if err := w.tm.Terminate(temporalmodel.TerminateRequest{WorkflowID: w.id, RunID: w.open.id, Reason: why}); err != nil {
		w.t.Fatalf("terminate: %v", err)
	}
	w.endOpen(why)
}

// endOpen forgets the run the world scripted: it was closed.
func (w *CarryWorld) endOpen(why string) {
	if w.open != nil {
		w.rec.Add(w.open.owner.ServerID, "run %s closed (%s) with %d waiting, %d sources unread", short(w.open.id), why,
			len(w.open.queue), len(w.open.backlog))
	}
	w.open = nil
}

// uncarried reports whether some accepted request is neither completed nor waiting in the open run.
func (w *CarryWorld) uncarried() bool {
	for k := range w.accepted {
		if !w.completed[k] {
			return true
		}
	}
	return false
}

// check is the oracle, once the last run handled its whole backlog: every accepted request was
// seen through by some run.
func (w *CarryWorld) check() {
	var lost []string
	for k, run := range w.accepted {
		if !w.completed[k] {
			lost = append(lost, fmt.Sprintf("%s (accepted by %s)", k[:8], short(run)))
		}
	}
	if len(lost) > 0 {
		slices.Sort(lost)
		w.violate("%d accepted requests never handled after the last run's carry-over: %s", len(lost), strings.Join(lost, ", "))
	}
}

// short is a run ID's distinguishing tail, for the timeline.
func short(runID string) string { return runID[max(0, len(runID)-4):] }

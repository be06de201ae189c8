package drill

import (
	"io"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// The checks must catch what they are for: these feed them made-up records.

var t0 = time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func started(q, srv string, tok int64, ms int) event.Event {
	return event.Event{Kind: event.TermStarted, Queue: q, ServerID: srv, Token: tok, At: at(ms)}
}

func ended(q string, tok int64, ms int) event.Event {
	return event.Event{Kind: event.TermEnded, Queue: q, Token: tok, At: at(ms)}
}

func testDrill() *Drill {
	return &Drill{cfg: Config{Out: io.Discard, Project: "drill"}.withDefaults(), plan: plan{queues: []string{"q1"}},
		observer: observer{stuck: map[string]time.Time{}}}
}

func checks(d *Drill) []string {
	var out []string
	for _, v := range d.violations {
		out = append(out, v.Check)
	}
	return out
}

func TestAnalyzeTermsOverlap(t *testing.T) {
	d := testDrill()
	a := &proc{id: "a", events: []event.Event{started("q1", "a", 10, 0), ended("q1", 10, 1000)}}
	b := &proc{id: "b", events: []event.Event{started("q1", "b", 20, 900), ended("q1", 20, 2000)}}
	d.checkTerms(d.buildTerms([]*proc{a, b}))
	if got := checks(d); len(got) != 1 || got[0] != CheckOneOwner {
		t.Fatalf("violations %v, want one %s", got, CheckOneOwner)
	}

	d = testDrill()
	b.events = []event.Event{started("q1", "b", 20, 1001), ended("q1", 20, 2000)}
	d.checkTerms(d.buildTerms([]*proc{a, b}))
	if got := checks(d); len(got) != 0 {
		t.Fatalf("consecutive terms flagged: %v", got)
	}
}

func TestAnalyzeSIGKILLEndsTermsAtTheKill(t *testing.T) {
	d := testDrill()
	a := &proc{id: "a", events: []event.Event{started("q1", "a", 10, 0)}, killedAt: at(500), exitedAt: at(600)}
	b := &proc{id: "b", events: []event.Event{started("q1", "b", 20, 550), ended("q1", 20, 900)}}
	d.checkTerms(d.buildTerms([]*proc{a, b}))
	if got := checks(d); len(got) != 0 {
		t.Fatalf("violations %v, want none", got)
	}
	b.events[0] = started("q1", "b", 20, 450)
	d.checkTerms(d.buildTerms([]*proc{a, b}))
	if got := checks(d); len(got) != 1 || got[0] != CheckOneOwner {
		t.Fatalf("violations %v, want one %s: the successor started before the kill", got, CheckOneOwner)
	}
}

// A SIGSTOPped leader logs its term's end only after SIGCONT: the term counts as ended at the stop,
// unless the process acted for it after SIGCONT.
func TestAnalyzeSIGSTOPTerm(t *testing.T) {
	mk := func(extra ...event.Event) []*proc {
		a := &proc{id: "a", events: append([]event.Event{started("q1", "a", 10, 0), ended("q1", 10, 5100)}, extra...),
			stops: []stopWindow{{Stop: at(1000), Resume: at(5000)}}}
		b := &proc{id: "b", events: []event.Event{started("q1", "b", 20, 3000), ended("q1", 20, 9000)}}
		return []*proc{a, b}
	}
	d := testDrill()
	d.checkTerms(d.buildTerms(mk()))
	if got := checks(d); len(got) != 0 {
		t.Fatalf("violations %v, want none", got)
	}
	d = testDrill()
	acted := event.Event{Kind: event.TakenOver, Queue: "q1", Token: 10, RunID: "r", At: at(5050)}
	d.checkTerms(d.buildTerms(mk(acted)))
	got := strings.Join(checks(d), ",")
	if !strings.Contains(got, CheckStoppedActed) || !strings.Contains(got, CheckOneOwner) {
		t.Fatalf("violations %v, want %s and %s", got, CheckStoppedActed, CheckOneOwner)
	}
}

func TestAnalyzeRunsOverlapAndFencing(t *testing.T) {
	d := testDrill()
	terms := map[string][]*term{"q1": {
		{Election: "q1", Token: 10, Server: "a", Start: at(0), End: at(1000)},
		{Election: "q1", Token: 20, Server: "b", Start: at(1500), End: at(9000)},
	}}
	runs := map[string][]*run{"q1": {
		{RunID: "r1", Owner: takeover.Owner{Token: 10}, Start: at(10), Close: at(1600),
			Status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, Reason: "baton: taken over by b (token 20)"},
		{RunID: "r2", Owner: takeover.Owner{Token: 20}, Start: at(1700), Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING},
	}}
	d.checkRuns(terms, runs)
	if got := checks(d); len(got) != 0 {
		t.Fatalf("violations %v, want none", got)
	}
	// The new run starts before the old one closed; the old one was closed by something else.
	runs["q1"][1].Start = at(1550)
	runs["q1"][0].Reason = "terminated by WorkflowIDConflictPolicy"
	d.checkRuns(terms, runs)
	got := strings.Join(checks(d), ",")
	if !strings.Contains(got, CheckOneOpenRun) || !strings.Contains(got, CheckFencedAction) {
		t.Fatalf("violations %v, want %s and %s", got, CheckOneOpenRun, CheckFencedAction)
	}
}

// Per step and queue, one new run; a balance handover starts a new segment.
func TestAnalyzeStepAccounting(t *testing.T) {
	f := &Fault{N: 1, Kind: KindSIGKILL}
	step := &Step{Fault: f, Name: "kill", At: at(1000)}
	next := &Step{Name: "shutdown", At: at(10000)}
	terms := map[string][]*term{"q1": {
		{Election: "q1", Token: 10, Server: "a", Start: at(0), End: at(1000)},
		{Election: "q1", Token: 20, Server: "b", Start: at(3000), End: at(3500), Balanced: true},
		{Election: "q1", Token: 30, Server: "c", Start: at(3600), End: at(9000)},
	}}
	runs := map[string][]*run{"q1": {
		{RunID: "r2", Owner: takeover.Owner{Token: 20}, Start: at(3100)},
		{RunID: "r3", Owner: takeover.Owner{Token: 30}, Start: at(3700)},
	}}
	d := testDrill()
	d.accountSteps([]*Step{step, next}, terms, runs)
	if got := checks(d); len(got) != 0 {
		t.Fatalf("violations %v, want none", got)
	}
	if f.Rebalanced != 1 || f.NewRuns != 2 || len(f.Latencies) != 1 || f.Latencies[0] != 2100*time.Millisecond {
		t.Fatalf("fault %+v: want 2 new runs, 1 rebalanced, latency 2.1s", f)
	}
	// Without the balance handover, two takeovers of one queue after one fault are a violation.
	terms["q1"][1].Balanced = false
	f2 := &Fault{N: 2, Kind: KindSIGKILL}
	d = testDrill()
	d.accountSteps([]*Step{{Fault: f2, Name: "kill", At: at(1000)}, next}, terms, runs)
	if got := checks(d); len(got) != 1 || got[0] != CheckOneNewRun {
		t.Fatalf("violations %v, want one %s", got, CheckOneNewRun)
	}

	// A term that the next fault cuts short before it started a run is that fault's business; one
	// that ends within its own step without a run, or never ends, is a violation.
	noRun := func(end time.Time, how string) map[string][]*term {
		return map[string][]*term{"q1": {
			{Election: "q1", Token: 10, Server: "a", Start: at(0), End: at(1000)},
			{Election: "q1", Token: 40, Server: "d", Start: at(8000), End: end, EndHow: how},
		}}
	}
	cut := &Step{Fault: &Fault{N: 4, Kind: KindSIGSTOP}, Name: "stop", At: at(9000)}
	for _, tc := range []struct {
		name  string
		terms map[string][]*term
		want  int
	}{
		{"cut by the next fault", noRun(at(9500), "sigstop"), 0},
		{"ended in its own step", noRun(at(8500), "logged"), 1},
		{"never ended", noRun(time.Time{}, "open"), 1},
	} {
		d = testDrill()
		d.accountSteps([]*Step{{Fault: &Fault{N: 3, Kind: KindSIGKILL}, Name: "kill", At: at(1000)}, cut, next}, tc.terms, map[string][]*run{})
		if got := checks(d); len(got) != tc.want {
			t.Errorf("%s: violations %v, want %d", tc.name, got, tc.want)
		}
	}
}

// A run that continued as new is a normal end only when its successor is the next run of the same
// chain under the same owner; the chain counts as one new run of its term.
func TestAnalyzeContinuedAsNewMustStayWithTheOwner(t *testing.T) {
	terms := map[string][]*term{"q1": {
		{Election: "q1", Token: 10, Server: "a", Start: at(0), End: at(1000)},
		{Election: "q1", Token: 20, Server: "b", Start: at(1500), End: at(9000)},
	}}
	a, b := takeover.Owner{ServerID: "a", Token: 10}, takeover.Owner{ServerID: "b", Token: 20}
	mk := func(next *run) map[string][]*run {
		return map[string][]*run{"q1": {
			{RunID: "r1", FirstRunID: "r1", Owner: a, Start: at(10), Close: at(500),
				Status: enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, NextRunID: "r2"},
			next,
		}}
	}
	same := &run{RunID: "r2", FirstRunID: "r1", Owner: a, InputOwner: a, Start: at(500), Close: at(1600),
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, Reason: "baton: taken over by b (token 20)"}
	d := testDrill()
	d.checkRuns(terms, mk(same))
	if got := checks(d); len(got) != 0 {
		t.Fatalf("violations %v for a chain of one owner, want none", got)
	}

	for _, tc := range []struct {
		name string
		next run
	}{
		{"another owner's run", run{RunID: "r2", FirstRunID: "r1", Owner: b, InputOwner: b, Start: at(1600)}},
		{"another chain", run{RunID: "r2", FirstRunID: "r2", Owner: a, InputOwner: a, Start: at(500), Close: at(1600)}},
		{"another owner in the input", run{RunID: "r2", FirstRunID: "r1", Owner: a, InputOwner: b, Start: at(500), Close: at(1600)}},
		{"a run Temporal does not know", run{RunID: "r3", FirstRunID: "r1", Owner: a, InputOwner: a, Start: at(500), Close: at(1600)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := tc.next
			if next.Close.IsZero() {
				next.Status = enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
			} else {
				next.Status, next.Reason = enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "baton: taken over by b (token 20)"
			}
			d := testDrill()
			d.checkRuns(terms, mk(&next))
			if got := strings.Join(checks(d), ","); !strings.Contains(got, CheckRunRecords) {
				t.Fatalf("violations %q, want %s", got, CheckRunRecords)
			}
		})
	}

	// Step accounting counts the chain as the term's one new run.
	f := &Fault{N: 1, Kind: KindSIGKILL}
	d = testDrill()
	d.accountSteps([]*Step{{Fault: f, Name: "kill", At: at(0)}, {Name: "shutdown", At: at(1200)}}, terms, mk(same))
	if got := checks(d); len(got) != 0 || f.NewRuns != 1 {
		t.Fatalf("violations %v, %d new runs; want none and 1", got, f.NewRuns)
	}
}

// The load verdict: an accepted request without a done record is lost (whatever the reason), a key
// whose record became done twice is a double completion, a pending record the load wrote is left
// unfinished; one done record is handled.
func TestLoadJudge(t *testing.T) {
	t0 := time.Unix(1000, 0)
	done := func(sec int, v string, rev int64) ledger.Completion {
		return ledger.Completion{Seen: t0.Add(time.Duration(sec) * time.Second), Record: v, Rev: rev}
	}
	dones := map[string][]ledger.Completion{"a": {done(1, "done w1 5", 10)}, "d": {done(1, "done w1 5", 11), done(2, "done w2 9", 20)}}
	touched := map[string]bool{"a": true, "b": true, "d": true, "p": true}
	reqs := []loadreport.Accepted{{Key: "a", Queue: "q0", Sent: t0}, {Key: "b", Queue: "q0", Sent: t0}, {Key: "c", Queue: "q1", Sent: t0},
		{Key: "d", Queue: "q1", Sent: t0}}
	states := map[string]ledgerRecord{"a": {State: "done", Raw: "done w1 5"}, "b": {State: "pending", Raw: "pending w1 5"}, "d": {State: "done", Raw: "done w2 9"},
		"p": {State: "pending", Raw: "pending w3 7"}, "other": {State: "pending", Raw: "pending x 1"}}
	var st LoadStats
	lost, double, pending := judge(&st, reqs, states, dones, touched)
	if st.Handled != 2 || len(lost) != 2 || len(double) != 1 || len(pending) != 2 {
		t.Fatalf("handled %d, lost %v, double %v, pending %v; want 2 handled (a, d), lost b and c, double d, pending b and p (not another run's key)",
			st.Handled, lost, double, pending)
	}
	if !strings.Contains(double[0], "done w2 9@rev20") || !strings.Contains(lost[0]+lost[1], "no record") {
		t.Errorf("evidence: double %v, lost %v", double, lost)
	}
	if st.P50 != time.Second || st.Max != time.Second {
		t.Errorf("send -> handled p50 %v max %v, want 1s from the first done put", st.P50, st.Max)
	}
}

// Every termination must be Baton's run-scoped one, with a token that fits, once the owner's term
// has ended (a step-down excepted).
func TestAnalyzeTerminationReasons(t *testing.T) {
	own := &term{Election: "q1", Token: 10, Server: "a", Start: at(0), End: at(1000)}
	for _, tc := range []struct {
		reason string
		close  int
		ok     bool
	}{
		{"baton: a stepped down (token 10)", 500, true},
		{"baton: a stepped down (token 9)", 500, false},
		{"baton: taken over by b (token 20)", 1500, true},
		{"baton: taken over by b (token 10)", 1500, false},
		{"baton: taken over by b (token 20)", 900, false},
		{"baton: reconciler c (token 3): heartbeat of a (token 10) stale for 1.5s", 1500, true},
		{"baton: reconciler c (token 3): run of a (token 11) has no live owner", 1500, false},
		{"baton: reconciler c (token 3): run of a (token 10) has no live owner", 1500, true},
		{"baton: reconciler c (token 3): heartbeat of a (token 10) stale for 1.5s", 900, false},
		{"baton: started by a at token 10 after its term ended", 1500, true},
		{"baton: started by a at token 12 after its term ended", 1500, false},
		{"terminated by WorkflowIDConflictPolicy", 1500, false},
	} {
		d := testDrill()
		r := &run{RunID: "r1", Owner: takeover.Owner{Token: 10}, Start: at(10), Close: at(tc.close),
			Status: enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, Reason: tc.reason}
		d.checkTermination("q1", r, own, []*term{own})
		if got := checks(d); (len(got) == 0) != tc.ok {
			t.Errorf("%q closed at %d ms: violations %v, want ok=%v", tc.reason, tc.close, got, tc.ok)
		}
	}
}

package drill

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/converter"

	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/takeover"
)

// The checks a violation can name (the package doc says how each is checked).
const (
	CheckOneOwner     = "one-owner"             // two terms of one election overlapped (logs, or definitely in /status samples)
	CheckStoppedActed = "stopped-process-acted" // a SIGSTOPped worker acted after SIGCONT for a term it held when stopped
	CheckTokenOrder   = "token-order"           // a later term of an election did not carry a higher fencing token
	// CheckOneOpenRun: two runs of one dispatcher workflow were open at once (Temporal's start and
	// close times), or visibility still listed two Running runs after the settle bound.
	CheckOneOpenRun = "one-open-run"
	// CheckFencedAction: a run started after a successor's term began, or was terminated by other than
	// Baton's run-scoped terminate, or while its owner's term still held.
	CheckFencedAction = "fenced-action"
	// CheckRunRecords: a run without a term, closed by itself, or continued as new into a run that is
	// not the next of its chain under the same owner.
	CheckRunRecords     = "run-records"
	CheckOneNewRun      = "one-new-run-per-affected-queue" // a step's affected queue got other than one new run
	CheckOwnerWithinSLA = "owner-within-sla"               // a queue not owned by one worker with an open run within TakeoverSLA
	CheckOrphanCleanup  = "orphan-cleanup"                 // a run or heartbeat key not the leader's outlived CleanupSLA
	CheckUnexpectedExit = "unexpected-exit"                // a worker exited without the drill's signal
	CheckUncleanStop    = "unclean-stop"                   // a worker did not exit with 0 soon after SIGTERM
	CheckFaultFailed    = "fault-failed"                   // the drill could not complete a fault (a server or worker did not come back)
)

// Violation is one broken invariant, with its evidence.
type Violation struct {
	Check  string    `json:"check"`
	Fault  int       `json:"fault,omitempty"` // 1-based fault number; 0 when not tied to a fault
	Step   string    `json:"step,omitempty"`
	Queue  string    `json:"queue,omitempty"`
	At     time.Time `json:"at"`
	Detail string    `json:"detail"`
}

func (d *Drill) violate(v Violation) {
	d.mu.Lock()
	d.violations = append(d.violations, v)
	d.mu.Unlock()
	q := ""
	if v.Queue != "" {
		q = " " + v.Queue
	}
	d.logf("VIOLATION %s%s: %s", v.Check, q, v.Detail)
}

// term is one tenure of one election, as the workers logged it.
type term struct {
	Election   string // the queue, or "reconciler" (reconciler.ElectionQueue)
	Token      int64
	Server     string
	Start, End time.Time
	EndHow     string // logged, sigstop, sigkill, exit, open
	Balanced   bool   // resigned by the balancer (package balance) to spread leadership
}

func (t *term) label() string { return fmt.Sprintf("%s@%d", t.Server, t.Token) }

func (t *term) String() string {
	return fmt.Sprintf("%s [%s .. %s %s]", t.label(), t.Start.Format(tsFormat), t.End.Format(tsFormat), t.EndHow)
}

// run is one dispatcher run, as Temporal recorded it.
type run struct {
	RunID  string
	Owner  takeover.Owner // from the memo
	Start  time.Time
	Close  time.Time // zero while open
	Status enumspb.WorkflowExecutionStatus
	Reason string // termination reason
	// FirstRunID is the first run of the run's continue-as-new chain (the run itself for a chain's
	// head); NextRunID is the run it continued as new into.
	FirstRunID string
	NextRunID  string
	// InputOwner is the owner a continuation was started with (its input), the owner it acts for.
	InputOwner takeover.Owner
}

func (r *run) open() bool { return r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING }

// continuation tells a run that continued a chain from a chain's head, the run a term started.
func (r *run) continuation() bool { return r.FirstRunID != "" && r.FirstRunID != r.RunID }

// chain is the first run of r's chain.
func (r *run) chain() string {
	if r.FirstRunID == "" {
		return r.RunID
	}
	return r.FirstRunID
}

// finish settles the fleet one last time, stops every worker with SIGTERM and analyzes.
func (d *Drill) finish(ctx context.Context) {
	d.waitSteady(ctx, nil, nil, d.cfg.TakeoverSLA)
	d.mu.Lock()
	d.steps = append(d.steps, &Step{Name: "shutdown", At: time.Now()})
	var live []*proc
	for _, p := range d.procs {
		if p.alive() {
			live = append(live, p)
		}
	}
	d.mu.Unlock()
	d.logf("stopping the %d workers (SIGTERM)", len(live))
	for _, p := range live {
		p.send(syscall.SIGTERM)
	}
	for _, p := range live {
		_ = d.waitStopped(ctx, p)
	}
	d.analyze(ctx)
}

// analyze runs the post-hoc checks over the workers' logs and Temporal's records.
func (d *Drill) analyze(ctx context.Context) {
	d.mu.Lock()
	procs := append([]*proc(nil), d.procs...)
	steps := append([]*Step(nil), d.steps...)
	d.mu.Unlock()
	terms := d.buildTerms(procs)
	d.checkTerms(terms)
	runs, err := d.fetchRuns(ctx, procs)
	if err != nil {
		d.violate(Violation{Check: CheckRunRecords, At: time.Now(), Detail: "reading Temporal's records: " + err.Error()})
	}
	d.checkRuns(terms, runs)
	d.accountSteps(steps, terms, runs)
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ts := range terms {
		d.checks.Terms += len(ts)
	}
	for _, rs := range runs {
		d.checks.Runs += len(rs)
	}
	// The workers have exited, so their logs hold every run of the load's handler.
	for _, c := range d.handlerRuns {
		if c > 1 && d.loadStats != nil {
			d.loadStats.Redispatched++
		}
	}
}

// buildTerms reconstructs every term from the events. A term's end is its logged end, with two
// exceptions: a SIGKILLed process cannot log one, and cannot act after the kill, so its open terms
// end at the kill; a SIGSTOPped process logs its end only after SIGCONT (its watchdog only runs
// then), so a term it held when stopped ends at the stop, provided the process logs no action for
// that term after SIGCONT; if it does, the term lasted until its logged end and the action is a
// violation of its own.
func (d *Drill) buildTerms(procs []*proc) map[string][]*term {
	out := map[string][]*term{}
	for _, p := range procs {
		p.mu.Lock()
		stops := append([]stopWindow(nil), p.stops...)
		killedAt, exitedAt := p.killedAt, p.exitedAt
		p.mu.Unlock()
		events := p.snapshotEvents()
		byToken := map[int64]*term{}
		var order []*term
		for _, e := range events {
			switch e.Kind {
			case event.TermStarted:
				t := &term{Election: e.Queue, Token: e.Token, Server: e.ServerID, Start: e.At}
				byToken[e.Token] = t
				order = append(order, t)
			case event.TermEnded:
				if t := byToken[e.Token]; t != nil {
					t.End, t.EndHow = e.At, "logged"
				}
			}
		}
		for _, t := range order {
			if t.End.IsZero() {
				switch {
				case !killedAt.IsZero():
					t.End, t.EndHow = killedAt, "sigkill"
				case !exitedAt.IsZero():
					t.End, t.EndHow = exitedAt, "exit"
				default:
					t.End, t.EndHow = time.Now(), "open"
				}
			}
			for _, w := range stops {
				if !t.Start.Before(w.Stop) || !t.End.After(w.Stop) {
					continue
				}
				resumed := w.Resume
				if resumed.IsZero() {
					resumed = w.Stop
				}
				var acted []string
				for _, e := range events {
					if actionKinds[e.Kind] && e.Token != 0 && e.Token == t.Token && e.At.After(resumed) {
						acted = append(acted, fmt.Sprintf("%s %q at %s", e.Kind, e.RunID+e.PriorRunID, e.At.Format(tsFormat)))
					}
				}
				if len(acted) > 0 {
					d.violate(Violation{Check: CheckStoppedActed, Queue: t.Election, At: resumed, Detail: fmt.Sprintf(
						"%s acted for term %d (held when SIGSTOPped at %s) after SIGCONT at %s: %s", p.id, t.Token,
						w.Stop.Format(tsFormat), resumed.Format(tsFormat), strings.Join(acted, "; "))})
					continue
				}
				t.End, t.EndHow = w.Stop, "sigstop"
			}
			for _, e := range events {
				if e.Kind == event.HandingOver && e.Queue == t.Election && !e.At.Before(t.Start) && !e.At.After(t.End) {
					t.Balanced = true
				}
			}
			out[t.Election] = append(out[t.Election], t)
		}
	}
	for _, ts := range out {
		sort.Slice(ts, func(i, j int) bool { return ts[i].Start.Before(ts[j].Start) })
	}
	return out
}

// checkTerms: per election, no two terms overlap and tokens grow with the start times.
func (d *Drill) checkTerms(terms map[string][]*term) {
	for el, ts := range terms {
		var last *term // the term with the latest end so far
		for i, t := range ts {
			if last != nil && t.Start.Before(last.End) {
				d.violate(Violation{Check: CheckOneOwner, Queue: el, At: t.Start, Detail: fmt.Sprintf(
					"terms overlap by %v: %s and %s", last.End.Sub(t.Start), last, t)})
			}
			if i > 0 && t.Token <= ts[i-1].Token {
				d.violate(Violation{Check: CheckTokenOrder, Queue: el, At: t.Start, Detail: fmt.Sprintf(
					"term %s started after %s with a token not above it", t, ts[i-1])})
			}
			if last == nil || t.End.After(last.End) {
				last = t
			}
		}
	}
}

// fetchRuns reads every dispatcher run of the drill's queues from Temporal: the run IDs come from
// visibility and from the workers' logs (visibility may lag), each run's times, status and owner
// from DescribeWorkflowExecution (its mutable state), and a terminated run's reason from its
// history's close event.
func (d *Drill) fetchRuns(ctx context.Context, procs []*proc) (map[string][]*run, error) {
	queueOf := map[string]string{}
	for _, q := range d.allQueues() {
		queueOf[d.workflowID(q)] = q
	}
	seen := map[[2]string]bool{}
	var todo [][2]string // workflow ID and run ID
	add := func(wid, runID string) {
		if id := [2]string{wid, runID}; queueOf[wid] != "" && runID != "" && !seen[id] {
			seen[id] = true
			todo = append(todo, id)
		}
	}
	if err := d.listRuns(ctx, false, add); err != nil {
		return nil, err
	}
	for _, p := range procs {
		for _, e := range p.snapshotEvents() {
			if e.Kind == event.TakenOver {
				add(d.workflowID(e.Queue), e.RunID)
			}
		}
	}
	out := map[string][]*run{}
	for len(todo) > 0 {
		wid, runID := todo[0][0], todo[0][1]
		todo = todo[1:]
		r, err := d.fetchRun(ctx, wid, runID)
		if err != nil {
			return out, err
		}
		out[queueOf[wid]] = append(out[queueOf[wid]], r)
		// Follow a chain to its end: visibility may not list the run it continued into yet.
		add(wid, r.NextRunID)
	}
	for _, rs := range out {
		sort.Slice(rs, func(i, j int) bool { return rs[i].Start.Before(rs[j].Start) })
	}
	return out, nil
}

// fetchRun reads one run: times, status, chain and owner from its mutable state; from its history, a
// terminated run's reason, a continued run's successor and a continuation's input owner.
func (d *Drill) fetchRun(ctx context.Context, wid, runID string) (*run, error) {
	r, err := d.describe(ctx, wid, runID)
	if err != nil {
		return nil, err
	} else if r.RunID == "" {
		return nil, fmt.Errorf("describe %s/%s: Temporal has no record of it", wid, runID)
	}
	if r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED || r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW {
		ev := d.firstEvent(ctx, wid, runID, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
		r.Reason = ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
		r.NextRunID = ev.GetWorkflowExecutionContinuedAsNewEventAttributes().GetNewExecutionRunId()
	}
	if r.continuation() {
		// The dispatcher's input starts with the Owner's fields (dispatcher.Input embeds it).
		ev := d.firstEvent(ctx, wid, runID, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		if p := ev.GetWorkflowExecutionStartedEventAttributes().GetInput().GetPayloads(); len(p) > 0 {
			_ = converter.GetDefaultDataConverter().FromPayload(p[0], &r.InputOwner)
		}
	}
	return r, nil
}

// firstEvent is the first event of the run's history under filter (its close event, or its start
// event), nil when it cannot be read.
func (d *Drill) firstEvent(ctx context.Context, wid, runID string, filter enumspb.HistoryEventFilterType) *historypb.HistoryEvent {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	iter := d.tc.GetWorkflowHistory(ctx, wid, runID, false, filter)
	if !iter.HasNext() {
		return nil
	}
	ev, _ := iter.Next()
	return ev
}

func (d *Drill) allQueues() []string {
	qs := append([]string(nil), d.queues...)
	for i := 1; i <= d.count(KindOrphan); i++ {
		qs = append(qs, fmt.Sprintf("solo%d", i))
	}
	return qs
}

// checkRuns checks Temporal's records of the runs against each other and against the terms.
//
// "Open dispatcher runs per queue never above one" is checked exactly, not by sampling: every run
// is open from its start time to its close time as Temporal's own mutable state records them
// (DescribeWorkflowExecution, not visibility), so the runs of one workflow ID must form disjoint
// intervals. A takeover terminates the prior run by run ID and only then starts the next: the prior
// run's close time is before the next run's start time. Visibility, which lags, is used only to
// find run IDs and at each settle (waitSteady), where it must come to list exactly one Running run
// within the settle bound.
func (d *Drill) checkRuns(terms map[string][]*term, runs map[string][]*run) {
	far := time.Now().Add(24 * time.Hour)
	end := func(r *run) time.Time {
		if r.Close.IsZero() {
			return far
		}
		return r.Close
	}
	for q, rs := range runs {
		var last *run
		for _, r := range rs {
			if last != nil && r.Start.Before(end(last)) {
				d.violate(Violation{Check: CheckOneOpenRun, Queue: q, At: r.Start, Detail: fmt.Sprintf(
					"run %s (token %d, %s..%s) and run %s (token %d, from %s) were open at once",
					last.RunID, last.Owner.Token, last.Start.Format(tsFormat), fmtClose(last), r.RunID, r.Owner.Token, r.Start.Format(tsFormat))})
			}
			if last == nil || end(r).After(end(last)) {
				last = r
			}
		}
		for tok, same := range newRuns(rs) {
			if len(same) > 1 {
				var ids []string
				for _, r := range same {
					ids = append(ids, r.RunID)
				}
				d.violate(Violation{Check: CheckOneNewRun, Queue: q, At: same[1].Start, Detail: fmt.Sprintf(
					"term token %d started %d runs: %v", tok, len(same), ids)})
			}
		}
		ts := terms[q]
		termOf := map[int64]*term{}
		for _, t := range ts {
			termOf[t.Token] = t
		}
		for _, r := range rs {
			t := termOf[r.Owner.Token]
			if t == nil {
				if r.Start.After(d.started) {
					d.violate(Violation{Check: CheckRunRecords, Queue: q, At: r.Start, Detail: fmt.Sprintf(
						"run %s has owner %s token %d, a term no worker logged", r.RunID, r.Owner.ServerID, r.Owner.Token)})
				}
				continue
			}
			if r.Start.After(t.End) && !r.continuation() {
				// Started after its term ended: harmful if a successor's term had begun by then. (A
				// continuation is started by its chain, not by a leader: checkContinuation and the
				// open-run intervals judge it.)
				for _, s := range ts {
					if s.Token > t.Token && s.Start.Before(r.Start) {
						d.violate(Violation{Check: CheckFencedAction, Queue: q, At: r.Start, Detail: fmt.Sprintf(
							"run %s of term %s started at %s, after the successor term %s began", r.RunID, t, r.Start.Format(tsFormat), s)})
						break
					}
				}
			}
			switch r.Status {
			case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
				d.checkContinuation(q, r, t, rs)
			case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
				d.checkTermination(q, r, t, ts)
			default:
				d.violate(Violation{Check: CheckRunRecords, Queue: q, At: r.Close, Detail: fmt.Sprintf(
					"run %s of %s closed by itself: %s", r.RunID, t, r.Status)})
			}
		}
	}
}

// checkContinuation: a run that continued as new closed normally only if the run it continued into
// is the next of the same chain and carries the same owner, in its memo and in its input: the chain
// stays the run of the term that started it. Anything else is a run that handed the dispatcher to
// someone other than its owner.
func (d *Drill) checkContinuation(q string, r *run, t *term, rs []*run) {
	bad := func(format string, args ...any) {
		d.violate(Violation{Check: CheckRunRecords, Queue: q, At: r.Close, Detail: fmt.Sprintf("run %s of term %s continued as new at %s: ",
			r.RunID, t, fmtClose(r)) + fmt.Sprintf(format, args...)})
	}
	if r.NextRunID == "" {
		bad("its history names no new run")
		return
	}
	var next *run
	for _, s := range rs {
		if s.RunID == r.NextRunID {
			next = s
		}
	}
	switch {
	case next == nil:
		bad("into run %s, which Temporal has no record of", r.NextRunID)
	case next.chain() != r.chain():
		bad("into run %s of another chain (first run %s, not %s)", next.RunID, next.chain(), r.chain())
	case next.Owner.Token != r.Owner.Token || next.Owner.ServerID != r.Owner.ServerID:
		bad("into run %s owned by %s at token %d", next.RunID, next.Owner.ServerID, next.Owner.Token)
	case next.InputOwner.Token != r.Owner.Token || next.InputOwner.ServerID != r.Owner.ServerID:
		bad("into run %s started for %s at token %d", next.RunID, next.InputOwner.ServerID, next.InputOwner.Token)
	}
}

// checkTermination: a run is only ever terminated by Baton, by its run ID, with a reason naming who
// and under which token: by a successor (higher token) taking over, by its own term stepping down,
// or by the reconciler once the owner's term is over. Anything else (a WorkflowIDConflictPolicy
// termination by a start, an operator) is a violation, and so is a termination while the owner's
// term still held, except its own step-down.
func (d *Drill) checkTermination(q string, r *run, t *term, ts []*term) {
	bad := func(format string, args ...any) {
		d.violate(Violation{Check: CheckFencedAction, Queue: q, At: r.Close, Detail: fmt.Sprintf("run %s of term %s terminated at %s with reason %q: ",
			r.RunID, t, r.Close.Format(tsFormat), r.Reason) + fmt.Sprintf(format, args...)})
	}
	why, ok := takeover.ParseReason(r.Reason)
	if !ok {
		bad("not a run-scoped termination by Baton")
		return
	}
	switch tok, named := why.RunToken(); {
	case why.Kind == takeover.ReasonTakenOver && why.Token <= t.Token:
		bad("taken over by a token not above the owner's")
	case named && tok != t.Token:
		bad("the reason (%s) names another owner token", why.Kind)
	}
	// Each but a step-down may only land once the owner's term has ended.
	if why.Kind != takeover.ReasonSteppedDown && t.End.After(r.Close) {
		bad("the owner's term still held (it ended %s)", t.End.Format(tsFormat))
	}
}

func fmtClose(r *run) string {
	if r.Close.IsZero() {
		return "open"
	}
	return r.Close.Format(tsFormat)
}

// accountSteps attributes every queue-election term to the step in whose window it started, and the
// term's runs with it. A fault must cost each affected queue exactly one new run. The balancer
// (package balance) may then move a queue on purpose, by a graceful handover, to spread leadership
// (at once when one worker won many queues in a takeover): so a queue's new terms are cut into
// segments after every balance handover, and each segment must hold exactly one new run (or none,
// when it was handed over before it started one, or the next fault cut it short). The runs of the
// segments after a balance handover are counted as rebalancing. The takeover latency of a queue is
// from the step's instant to the start (Temporal's record) of its first new run.
func (d *Drill) accountSteps(steps []*Step, terms map[string][]*term, runs map[string][]*run) {
	sort.Slice(steps, func(i, j int) bool { return steps[i].At.Before(steps[j].At) })
	for i, s := range steps {
		s.End = time.Now()
		if i+1 < len(steps) {
			s.End = steps[i+1].At
		}
	}
	runsOf := map[string]map[int64][]*run{}
	for q, rs := range runs {
		runsOf[q] = newRuns(rs)
	}
	for _, s := range steps {
		f := s.Fault
		if f == nil {
			continue
		}
		for _, q := range d.allQueues() {
			var before *term
			var nts []*term
			for _, t := range terms[q] {
				if t.Start.Before(s.At) {
					before = t
				} else if t.Start.Before(s.End) {
					nts = append(nts, t)
				}
			}
			if len(nts) == 0 {
				continue
			}
			c := QueueChange{Queue: q}
			if before != nil {
				c.From = before.Server
			}
			for _, t := range nts {
				label := t.label()
				if t.Balanced {
					label += "(handed over)"
				}
				c.Terms = append(c.Terms, label)
			}
			rebalance := before != nil && before.Balanced
			for len(nts) > 0 {
				n := 1 + slices.IndexFunc(nts, func(t *term) bool { return t.Balanced }) // the segment ends at a handover
				if n == 0 {
					n = len(nts)
				}
				seg, last := nts[:n], nts[n-1]
				nts = nts[n:]
				var ids []string
				for _, t := range seg {
					for _, r := range runsOf[q][t.Token] {
						ids = append(ids, r.RunID)
						if l := r.Start.Sub(s.At); c.Latency == 0 || l < c.Latency {
							c.Latency = l
						}
					}
				}
				// No run is fine for a term handed over before it started one, and for a term the next
				// fault cut short (it ended in a later step's window, whose accounting covers the queue).
				cut := last.EndHow != "open" && !last.End.IsZero() && !last.End.Before(s.End)
				if len(ids) > 1 || (len(ids) == 0 && !last.Balanced && !cut) {
					var labels []string
					for _, t := range seg {
						labels = append(labels, t.label())
					}
					d.violate(Violation{Check: CheckOneNewRun, Fault: f.N, Step: stepName(s), Queue: q, At: s.At, Detail: fmt.Sprintf(
						"%d new runs %v for terms %v after the step (no balance handover between them); all new terms: %v",
						len(ids), ids, labels, c.Terms)})
				}
				if rebalance {
					c.Rebalanced += len(ids)
				}
				c.Runs = append(c.Runs, ids...)
				rebalance = true
			}
			s.Changes = append(s.Changes, c)
			solo := strings.HasPrefix(q, "solo")
			if !solo && !slices.Contains(f.Affected, q) {
				f.Affected = append(f.Affected, q)
			}
			f.NewRuns += len(c.Runs)
			f.Rebalanced += c.Rebalanced
			if !solo && !s.Recovery && c.Latency > 0 {
				f.Latencies = append(f.Latencies, c.Latency)
			}
		}
	}
}

// newRuns groups a queue's runs by the token of the term that started them. A term's new run is the
// head of a chain; the runs it continued into are the same dispatcher.
func newRuns(rs []*run) map[int64][]*run {
	out := map[int64][]*run{}
	for _, r := range rs {
		if !r.continuation() {
			out[r.Owner.Token] = append(out[r.Owner.Token], r)
		}
	}
	return out
}

package opscli

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"golang.org/x/time/rate"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// The checks of verify, each an invariant a live deployment must show from outside.
const (
	// CheckLedRun: a led queue has a running dispatcher run.
	CheckLedRun = "led-run"
	// CheckRunOwner: the running run's memo names the leader and its token (the leader's create
	// revision).
	CheckRunOwner = "run-owner"
	// CheckUnledRun: no run is running for a queue nobody leads (an orphan the reconciler has not
	// ended yet).
	CheckUnledRun = "unled-run"
	// CheckHeartbeat: the heartbeat entry names the leader's token and its running run.
	CheckHeartbeat = "heartbeat"
	// CheckTokenOrder: in the workflow ID's run history, no run has a lower token than the run before it.
	CheckTokenOrder = "token-order"
	// CheckSuperseded: a run superseded by a newer owner's was terminated with Baton's reason (never by
	// a conflict policy or by hand) and closed before its successor started.
	CheckSuperseded = "superseded"
)

// violation is one check a queue failed.
type violation struct {
	Check  string `json:"check"`
	Queue  string `json:"queue"`
	Detail string `json:"detail"`
}

// repair is a run that closed out of band and the run its owner replaced it with.
type repair struct {
	Queue  string `json:"queue"`
	RunID  string `json:"run_id"`
	Status string `json:"status"`
	// Reason is a terminated run's reason, as the terminate gave it.
	Reason      string        `json:"reason,omitempty"`
	Replacement string        `json:"replacement_run_id"`
	After       time.Duration `json:"replaced_after_ns"`
}

// verdict is what verify found.
type verdict struct {
	Project   string    `json:"project"`
	CheckedAt time.Time `json:"checked_at"`
	Queues    int       `json:"queues"`
	Runs      int       `json:"runs_read"`
	// LedgerFrom and LedgerTo are the etcd revisions of ledger history replayed for CheckLedgerTwice.
	LedgerFrom int64 `json:"ledger_from_revision,omitempty"`
	LedgerTo   int64 `json:"ledger_to_revision,omitempty"`
	// Since is -since as given; SinceRevision the etcd revision the ledger checks were judged after.
	Since         string      `json:"since,omitempty"`
	SinceRevision int64       `json:"since_revision,omitempty"`
	Violations    []violation `json:"violations"`
	// Repaired lists the runs that closed behind their owner's back (an operator's terminate or
	// cancel, a workflow that failed or returned) and that the owner replaced: not a violation, but
	// an interruption of dispatch someone should know about.
	Repaired []repair `json:"repaired,omitempty"`
	// Unjudged says what could not be read, so a check could not be made; verify then exits 2.
	Unjudged []string `json:"unjudged,omitempty"`
}

type verifyOptions struct {
	statusOptions
	history int           // runs read back per queue
	settle  time.Duration // a state violation must still hold this much later
	rate    float64       // Temporal visibility and history calls per second

	ledgerPrefix    string        // the dispatch ledger's; "" skips the ledger checks
	ledgerRevisions int64         // etcd revisions of ledger history replayed; 0: all etcd keeps
	pendingMax      time.Duration // a ledger record pending longer is a violation
	reconcilerMax   time.Duration // the reconciler's last completed cycle must be more recent
	since           since         // judge only what happened after it; zero: everything read
}

// Verify is `prog verify`: it judges a live deployment against Baton's invariants from etcd,
// Temporal and Redis only. The state checks (CheckLedRun, CheckRunOwner, CheckUnledRun,
// CheckHeartbeat) are made twice, -settle apart, so that a handover in flight is not reported; the
// history checks (CheckTokenOrder, CheckSuperseded) read the last -history runs of each queue's
// dispatcher workflow, at most -rate calls a second. From etcd: the reconciler's last completed cycle
// is recent (CheckReconciler), and in the dispatch ledger no key was completed twice in the history
// etcd keeps (CheckLedgerTwice, the last -ledger-revisions replayed) and none has been pending past
// -pending-max (CheckLedgerPending). Exit 0: no violation; 1: violations; 2: a
// server could not be read (or the configuration is invalid), so not everything was judged.
func Verify(ctx context.Context, prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	o, asJSON, err := parseVerify(prog, args, stdout, ignore)
	switch {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s verify: %v\n", prog, err)
		return ExitConfig
	}
	v := verify(ctx, o)
	if asJSON {
		b, _ := json.MarshalIndent(v, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		writeVerdict(stdout, v)
	}
	switch {
	case len(v.Violations) > 0:
		return ExitUnclean
	case len(v.Unjudged) > 0:
		return ExitConfig
	}
	return ExitOK
}

func parseVerify(prog string, args []string, stdout io.Writer, ignore []string) (verifyOptions, bool, error) {
	o := verifyOptions{history: 50, settle: 3 * time.Second, rate: 20,
		ledgerPrefix: ledger.DefaultPrefix, ledgerRevisions: 1_000_000, pendingMax: 10 * time.Minute}
	var err error
	if o.Common, err = LoadCommon(ignore...); err != nil {
		return o, false, err
	}
	o.reconcilerMax = 3 * cmp.Or(o.Cfg.Reconciler.Interval, reconciler.DefaultConfig().Interval)
	o.timeout = DefaultStatusTimeout
	var asJSON bool
	fs := flag.NewFlagSet(prog+" verify", flag.ContinueOnError)
	o.AddFlags(fs)
	fs.Var(Duration(&o.timeout), "timeout", "bound of every call to a server")
	fs.Var(Duration(&o.settle), "settle", "how long a state violation must hold to be reported (a handover takes milliseconds)")
	fs.IntVar(&o.history, "history", o.history, "runs of each queue's dispatcher workflow read back, newest first")
	fs.Float64Var(&o.rate, "rate", o.rate, "Temporal visibility and history calls per second, at most")
	fs.StringVar(&o.ledgerPrefix, "ledger-prefix", o.ledgerPrefix, "the dispatch ledger's etcd prefix (ledger.Config.Prefix); empty: no ledger checks")
	fs.Int64Var(&o.ledgerRevisions, "ledger-revisions", o.ledgerRevisions, "etcd revisions of ledger history replayed for completions made twice; 0: all etcd keeps")
	fs.Var(Duration(&o.pendingMax), "pending-max", "a ledger record pending (begun, not completed) longer is a violation")
	fs.Var(Duration(&o.reconcilerMax), "reconciler-max", "the reconciler's last completed cycle must be more recent (3 × "+envOf("Reconciler.Interval")+")")
	fs.Var(sinceValue{&o.since, time.Now}, "since", "judge only what happened after this point: a duration back from now (30m), an RFC 3339 time "+
		"(2026-11-28T15:04:05Z) or an etcd revision (a leader's token): hand-overs whose new run started after it, ledger completions and "+
		"pending records written after it; the state of the queues and the reconciler are judged as they are now")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a table")
	if err := Parse(fs, args, stdout); err != nil {
		return o, false, err
	}
	switch {
	case o.history < 2 || o.history > 10_000:
		return o, false, fmt.Errorf("-history must be 2 to 10000, got %d", o.history)
	case o.rate <= 0:
		return o, false, fmt.Errorf("-rate must be positive, got %v", o.rate)
	case o.ledgerRevisions < 0:
		return o, false, fmt.Errorf("-ledger-revisions must be 0 (all etcd keeps) or positive, got %d", o.ledgerRevisions)
	case o.pendingMax <= 0:
		return o, false, fmt.Errorf("-pending-max must be positive, got %s", o.pendingMax)
	case o.reconcilerMax <= 0:
		return o, false, fmt.Errorf("-reconciler-max must be positive, got %s", o.reconcilerMax)
	}
	if err := o.ReadSecrets(); err != nil {
		return o, false, err
	}
	o.queuesGiven = len(o.Cfg.Queues) > 0
	return o, asJSON, o.validate()
}

// verify runs every check.
func verify(ctx context.Context, o verifyOptions) verdict {
	rep := collectStatus(ctx, o.statusOptions)
	v := verdict{Project: o.Cfg.Project, CheckedAt: rep.CheckedAt, Queues: len(rep.Queues), Since: o.since.String()}
	for _, d := range rep.down {
		v.Unjudged = append(v.Unjudged, d+" could not be read")
	}
	if len(rep.down) > 0 {
		v.Unjudged = append(v.Unjudged, rep.Warnings...)
		return v
	}
	if found := stateViolations(rep); len(found) > 0 {
		// A handover in flight shows for milliseconds: report what still holds a moment later.
		time.Sleep(o.settle)
		again := stateViolations(collectStatus(ctx, o.statusOptions))
		for _, f := range found {
			if slices.ContainsFunc(again, func(a violation) bool { return a.Check == f.Check && a.Queue == f.Queue }) {
				v.Violations = append(v.Violations, f)
			}
		}
	}
	var lc Hooks
	defer func() { lc.Stop(ctx, o.timeout) }()
	v.etcdChecks(ctx, o, &lc)
	tc, err := lc.Temporal(o.Clients)
	if err != nil {
		v.Unjudged = append(v.Unjudged, fmt.Sprintf("temporal: %v", err))
		return v
	}
	h := historyReader{tc: tc, o: o, limit: rate.NewLimiter(rate.Limit(o.rate), 1)}
	for _, q := range rep.Queues {
		found, repaired, runs, err := h.check(ctx, q.Queue, q.Dispatcher.WorkflowID)
		v.Runs += runs
		v.Violations = append(v.Violations, found...)
		v.Repaired = append(v.Repaired, repaired...)
		if err != nil {
			v.Unjudged = append(v.Unjudged, fmt.Sprintf("%s: %v", q.Queue, err))
		}
	}
	return v
}

// stateViolations judges the queues as rep shows them.
func stateViolations(rep report) []violation {
	var out []violation
	for _, q := range rep.Queues {
		l, r, hb := q.Leader, q.Dispatcher, q.Heartbeat
		bad := func(check, format string, args ...any) {
			out = append(out, violation{Check: check, Queue: q.Queue, Detail: fmt.Sprintf(format, args...)})
		}
		running := r.Known && r.RunID != "" && r.Status == runningStatus
		switch {
		case !l.Known || !r.Known:
		case l.ServerID == "" && running:
			bad(CheckUnledRun, "run %s (%s, token %d) is running and nobody leads the queue", r.RunID, r.OwnerServerID, r.OwnerToken)
		case l.ServerID == "":
		case !running:
			bad(CheckLedRun, "led by %s (token %d) without a running dispatcher run (latest: %s)", l.ServerID, l.Token, latestRun(r))
		case r.OwnerToken != l.Token || r.OwnerServerID != l.ServerID:
			bad(CheckRunOwner, "run %s belongs to %s at token %d by its memo; the leader is %s at token %d", r.RunID, r.OwnerServerID, r.OwnerToken, l.ServerID, l.Token)
		case !hb.Known:
		case hb.ServerID == "":
			bad(CheckHeartbeat, "no heartbeat entry for the leader's run %s", r.RunID)
		case hb.Token != l.Token || hb.RunID != r.RunID:
			bad(CheckHeartbeat, "the heartbeat entry names run %s at token %d; the leader's run is %s at token %d", hb.RunID, hb.Token, r.RunID, l.Token)
		}
	}
	return out
}

// latestRun names the queue's latest run and its status, or "none".
func latestRun(r runCell) string {
	if r.RunID == "" {
		return "none"
	}
	return r.RunID + " " + r.Status
}

// historyReader reads dispatcher run histories back from Temporal, rate-limited.
type historyReader struct {
	tc    client.Client
	o     verifyOptions
	limit *rate.Limiter
}

// pastRun is one run of a dispatcher workflow ID, as visibility lists it.
type pastRun struct {
	runID        string
	status       enumspb.WorkflowExecutionStatus
	start, close time.Time
	owner        takeover.Owner
}

// check reads the last o.history runs of id and judges each one against the run after it; a run its
// own owner replaced after it closed out of band is reported as repaired.
func (h historyReader) check(ctx context.Context, queue, id string) ([]violation, []repair, int, error) {
	runs, err := h.list(ctx, id)
	if err != nil {
		return nil, nil, len(runs), err
	}
	out, repaired, err := h.judge(ctx, queue, id, runs)
	return out, repaired, len(runs), err
}

// judge judges each of runs (oldest first) against the run after it.
func (h historyReader) judge(ctx context.Context, queue, id string, runs []pastRun) ([]violation, []repair, error) {
	var out []violation
	var repaired []repair
	for i := 1; i < len(runs); i++ {
		prev, next := runs[i-1], runs[i]
		if !h.o.since.after(next.start, next.owner.Token) {
			continue // the hand-over to next happened before -since
		}
		if prev.status == enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW && next.owner.Token >= prev.owner.Token {
			continue // the same chain going on (a lower token after it is a stale owner's run: judged)
		}
		if next.owner.Token == prev.owner.Token {
			r, err := h.repairOf(ctx, queue, id, prev, next)
			if err != nil {
				return out, repaired, err
			}
			if r != nil {
				repaired = append(repaired, *r)
			}
			continue
		}
		v, err := h.handOver(ctx, queue, id, prev, next)
		if err != nil {
			return out, repaired, err
		}
		out = append(out, v...)
	}
	if n, last := failStreak(runs, time.Now(), func(r pastRun) bool { return h.o.since.after(r.start, r.owner.Token) }); n > 0 {
		out = append(out, violation{Check: CheckRunsFailing, Queue: queue, Detail: failingDetail(n, last)})
	}
	return out, repaired, nil
}

// handOver judges the hand-over from prev to next, a run of a later term.
func (h historyReader) handOver(ctx context.Context, queue, id string, prev, next pastRun) ([]violation, error) {
	bad := func(check, format string, args ...any) []violation {
		return []violation{{Check: check, Queue: queue, Detail: fmt.Sprintf(format, args...)}}
	}
	switch {
	case next.owner.Token < prev.owner.Token:
		return bad(CheckTokenOrder, "run %s (token %d) started after run %s (token %d)", next.runID, next.owner.Token, prev.runID, prev.owner.Token), nil
	case prev.close.IsZero() || prev.close.After(next.start):
		return bad(CheckSuperseded, "run %s (token %d) was still open when run %s (token %d) started", prev.runID, prev.owner.Token, next.runID, next.owner.Token), nil
	case prev.status == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		reason, err := h.terminateReason(ctx, id, prev.runID)
		if err != nil {
			return nil, err
		}
		if _, ours := takeover.ParseReason(reason); !ours {
			return bad(CheckSuperseded, "run %s (token %d) was terminated with %q, not by Baton, before run %s (token %d)",
				prev.runID, prev.owner.Token, reason, next.runID, next.owner.Token), nil
		}
	}
	return nil, nil
}

// repairOf returns the repair when prev, closed, was replaced by next of the same term because it
// closed out of band; nil when Baton closed it itself (a late start's own terminate).
func (h historyReader) repairOf(ctx context.Context, queue, id string, prev, next pastRun) (*repair, error) {
	if prev.close.IsZero() {
		return nil, nil
	}
	r := &repair{Queue: queue, RunID: prev.runID, Status: statusName(prev.status), Replacement: next.runID, After: next.start.Sub(prev.close)}
	if prev.status == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		reason, err := h.terminateReason(ctx, id, prev.runID)
		if err != nil {
			return nil, err
		}
		if _, ours := takeover.ParseReason(reason); ours {
			return nil, nil
		}
		r.Reason = reason
	}
	return r, nil
}

// list returns up to o.history runs of id, oldest first.
func (h historyReader) list(ctx context.Context, id string) ([]pastRun, error) {
	return listPastRuns(ctx, h.tc, id, h.o.history, h.o.timeout, h.limit.Wait)
}

// terminateReason reads the reason a terminated run was given, from its close event.
func (h historyReader) terminateReason(ctx context.Context, id, runID string) (string, error) {
	if err := h.limit.Wait(ctx); err != nil {
		return "", err
	}
	cctx, cancel := context.WithTimeout(ctx, h.o.timeout)
	defer cancel()
	iter := h.tc.GetWorkflowHistory(cctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return "", fmt.Errorf("close event of %s run %s: %w", id, runID, err)
		}
		if attrs := ev.GetWorkflowExecutionTerminatedEventAttributes(); attrs != nil {
			return attrs.GetReason(), nil
		}
	}
	return "", fmt.Errorf("close event of %s run %s: not a termination", id, runID)
}

// writeVerdict prints the violations as a table, then a summary line.
func writeVerdict(w io.Writer, v verdict) {
	if len(v.Violations) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "CHECK\tQUEUE\tDETAIL")
		for _, x := range v.Violations {
			fmt.Fprintf(tw, "%s\t%s\t%s\n", x.Check, x.Queue, x.Detail)
		}
		_ = tw.Flush()
	}
	for _, r := range v.Repaired {
		why := ""
		if r.Reason != "" {
			why = fmt.Sprintf(" (%q)", r.Reason)
		}
		fmt.Fprintf(w, "repaired: queue %s: run %s closed %s%s out of band; its owner replaced it with run %s %v later\n",
			r.Queue, r.RunID, r.Status, why, r.Replacement, r.After.Round(time.Millisecond))
	}
	for _, u := range v.Unjudged {
		fmt.Fprintf(w, "not judged: %s\n", u)
	}
	verdict := "ok"
	switch {
	case len(v.Violations) > 0:
		verdict = fmt.Sprintf("%d violation(s)", len(v.Violations))
	case len(v.Unjudged) > 0:
		verdict = "could not judge everything"
	}
	ledger := ""
	if v.LedgerTo > 0 {
		ledger = fmt.Sprintf(", ledger history from revision %d to %d", v.LedgerFrom, v.LedgerTo)
	}
	if v.Since != "" {
		ledger += fmt.Sprintf(", judged since %s", v.Since)
		if v.SinceRevision > 0 {
			ledger += fmt.Sprintf(" (etcd revision %d)", v.SinceRevision)
		}
	}
	fmt.Fprintf(w, "project %s: %d queue(s), %d run(s) read back%s: %s\n", v.Project, v.Queues, v.Runs, ledger, verdict)
}

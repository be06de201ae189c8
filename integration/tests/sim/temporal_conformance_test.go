package sim_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/integration/sim"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/takeover"
)

// op is one step of a conformance script. Runs are named by alias ("r1", "r2", ...: the order in
// which the script first saw them), so one script addresses the model's runs and the server's alike.
type op struct {
	verb string // start, retry, signalstart, signalretry, terminate, describe, oob
	// start
	conflict enumspb.WorkflowIdConflictPolicy
	reuse    enumspb.WorkflowIdReusePolicy
	token    int64
	// terminate and describe: by = run (run ID), current, chain (FirstExecutionRunId), unknown
	by    string
	alias int // the n-th run seen (modulo how many), when by names one
	// oob: terminate, cancel, complete, fail, can
	action string
}

func (o op) String() string {
	switch o.verb {
	case "start", "retry", "signalstart", "signalretry":
		return fmt.Sprintf("%s(conflict=%v reuse=%v token=%d)", o.verb, o.conflict, o.reuse, o.token)
	case "oob":
		return "out-of-band " + o.action
	}
	return fmt.Sprintf("%s(by %s #%d)", o.verb, o.by, o.alias)
}

// script draws a conformance script of n steps from seed.
func script(seed uint64, n int) []op {
	r := rand.New(rand.NewPCG(seed, 0x636f6e66))
	conflicts := []enumspb.WorkflowIdConflictPolicy{enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING, enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING}
	reuses := []enumspb.WorkflowIdReusePolicy{enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY, enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE}
	bys := []string{"run", "current", "chain", "unknown"}
	actions := []string{"terminate", "cancel", "complete", "fail", "can", "can"}
	ops := []op{{verb: "start", conflict: conflicts[0], reuse: reuses[0], token: 1}}
	for i := 1; i < n; i++ {
		var o op
		switch k := r.IntN(11); {
		case k == 10:
			// Signal-with-start: the server takes only USE_EXISTING (or none); a refused one is compared too.
			o = op{verb: "signalstart", conflict: conflicts[r.IntN(3)], reuse: reuses[0], token: int64(i + 1)}
			if r.IntN(2) == 0 {
				o.conflict = enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED
			}
		case k < 3:
			o = op{verb: "start", conflict: conflicts[r.IntN(3)], token: int64(i + 1)}
			// Mostly ALLOW_DUPLICATE (Baton's), else a reuse that refuses.
			if o.reuse = reuses[0]; r.IntN(3) == 0 {
				o.reuse = reuses[1+r.IntN(2)]
			}
		case k < 4:
			o = op{verb: "retry", conflict: conflicts[r.IntN(3)], reuse: reuses[0]}
			if r.IntN(3) == 0 {
				o.verb = "signalretry" // the last request ID again, as a signal-with-start
			}
		case k < 6:
			o = op{verb: "terminate", by: bys[r.IntN(4)], alias: r.IntN(1000)}
		case k < 8:
			o = op{verb: "describe", by: bys[r.IntN(2)], alias: r.IntN(1000)}
		default:
			o = op{verb: "oob", action: actions[r.IntN(len(actions))]}
		}
		ops = append(ops, o)
	}
	return ops
}

// unknownRunID is a run ID neither side ever made.
const unknownRunID = "5e1fc0de-0000-4000-8000-00000000beef"

// player runs a script against one service and writes what it observes, one line per step, with
// run IDs replaced by aliases.
type player struct {
	svc       service
	id        string
	aliases   map[string]string // run ID -> alias
	runs      []string          // by alias order
	lastReqID string
	reqs      int
	dc        converter.DataConverter
}

func newPlayer(svc service, id string) *player {
	return &player{svc: svc, id: id, aliases: map[string]string{}, dc: converter.GetDefaultDataConverter()}
}

func (p *player) alias(runID string) string {
	if runID == "" {
		return "-"
	}
	if a, ok := p.aliases[runID]; ok {
		return a
	}
	if runID == unknownRunID {
		return "unknown"
	}
	a := fmt.Sprintf("r%d", len(p.runs)+1)
	p.aliases[runID] = a
	p.runs = append(p.runs, runID)
	return a
}

// errName is what a comparison may rely on of an error: its serviceerror type (and for
// AlreadyStarted the run it names).
func (p *player) errName(err error) string {
	if err == nil {
		return "ok"
	}
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return "AlreadyStarted(" + p.alias(already.RunId) + ")"
	}
	var nf *serviceerror.NotFound
	var inv *serviceerror.InvalidArgument
	switch {
	case errors.As(err, &nf):
		return "NotFound"
	case errors.As(err, &inv):
		return "InvalidArgument"
	}
	return fmt.Sprintf("%T(%v)", err, err)
}

// target resolves a terminate's or describe's run: (run ID, first run ID).
func (p *player) target(o op) (string, string) {
	if len(p.runs) == 0 || o.by == "current" {
		return "", ""
	}
	run := p.runs[o.alias%len(p.runs)]
	switch o.by {
	case "unknown":
		return unknownRunID, ""
	case "chain":
		return "", run
	}
	return run, ""
}

func (p *player) step(ctx context.Context, o op) (string, error) {
	switch o.verb {
	case "start", "retry", "signalstart", "signalretry":
		reqID := p.lastReqID
		if (o.verb != "retry" && o.verb != "signalretry") || reqID == "" {
			p.reqs++
			reqID = fmt.Sprintf("%s-req-%d", p.id, p.reqs)
		}
		p.lastReqID = reqID
		owner := takeover.Owner{Project: "sim", Queue: "q", ServerID: "node", Token: o.token}
		pl, err := p.dc.ToPayload(owner)
		if err != nil {
			return "", err
		}
		req := temporalmodel.StartRequest{WorkflowID: p.id, RequestID: reqID, WorkflowType: conformanceWorkflow,
			Memo: &commonpb.Memo{Fields: map[string]*commonpb.Payload{takeover.MemoKey: pl}}, Reuse: o.reuse, Conflict: o.conflict}
		if o.verb == "signalstart" || o.verb == "signalretry" {
			req.Signal = "sim.nudge"
		}
		resp, err := p.svc.start(ctx, req)
		if err != nil {
			return p.errName(err), nil
		}
		return fmt.Sprintf("ok run=%s started=%v", p.alias(resp.RunID), resp.Started), nil
	case "terminate":
		runID, first := p.target(o)
		err := p.svc.terminate(ctx, temporalmodel.TerminateRequest{WorkflowID: p.id, RunID: runID, FirstRunID: first, Reason: "script"})
		return p.errName(err), nil
	case "describe":
		runID, _ := p.target(o)
		d, err := p.svc.describe(ctx, p.id, runID)
		if err != nil {
			return p.errName(err), nil
		}
		return p.runLine(d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), d.GetWorkflowExecutionInfo()), nil
	case "oob":
		d, err := p.svc.describe(ctx, p.id, "")
		if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return "no open run", nil
		}
		runID := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		return "closed " + p.alias(runID), p.svc.outOfBand(ctx, p.id, runID, o.action)
	}
	return "", fmt.Errorf("unknown op %q", o.verb)
}

type execInfo interface {
	GetStatus() enumspb.WorkflowExecutionStatus
	GetFirstRunId() string
	GetMemo() *commonpb.Memo
}

// runLine is one run as a comparison sees it: alias, status, chain, owner from the memo.
func (p *player) runLine(runID string, info execInfo) string {
	owner, found, err := takeover.DecodeOwner(p.dc, info.GetMemo())
	return fmt.Sprintf("%s %v first=%s owner=%v/%d/%v", p.alias(runID), info.GetStatus(), p.alias(info.GetFirstRunId()), found, owner.Token, err)
}

// state is everything known after a step: the current run, and every run seen with its close event.
func (p *player) state(ctx context.Context) (string, error) {
	var b strings.Builder
	d, err := p.svc.describe(ctx, p.id, "")
	if err != nil {
		b.WriteString("current: " + p.errName(err))
	} else {
		b.WriteString("current: " + p.runLine(d.GetWorkflowExecutionInfo().GetExecution().GetRunId(), d.GetWorkflowExecutionInfo()))
	}
	for i := 0; i < len(p.runs); i++ {
		runID := p.runs[i]
		d, err := p.svc.describe(ctx, p.id, runID)
		if err != nil {
			return "", fmt.Errorf("describe %s: %w", runID, err)
		}
		b.WriteString("; " + p.runLine(runID, d.GetWorkflowExecutionInfo()))
		if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			et, next, err := p.svc.closeEvent(ctx, p.id, runID)
			if err != nil {
				return "", fmt.Errorf("close event of %s: %w", runID, err)
			}
			fmt.Fprintf(&b, " closed-by=%v next=%s", et, p.alias(next))
		}
	}
	return b.String(), nil
}

// play runs ops on svc and returns one observation line per step.
func play(ctx context.Context, svc service, id string, ops []op) ([]string, error) {
	p := newPlayer(svc, id)
	lines := make([]string, 0, len(ops))
	for i, o := range ops {
		got, err := p.step(ctx, o)
		if err != nil {
			return nil, fmt.Errorf("step %d %v: %w", i, o, err)
		}
		st, err := p.state(ctx)
		if err != nil {
			return nil, fmt.Errorf("step %d %v: %w", i, o, err)
		}
		lines = append(lines, fmt.Sprintf("%v -> %s | %s", o, got, st))
	}
	vis, err := p.visibility(ctx)
	if err != nil {
		return nil, err
	}
	return append(lines, vis...), nil
}

// visibility is what the script's runs look like at its end: the visibility listing (paged two rows
// at a time), in its order, and each run's started event. The server's visibility is eventually
// consistent, so it is read until it shows every run with the status describe gives.
func (p *player) visibility(ctx context.Context) ([]string, error) {
	var rows []*workflowpb.WorkflowExecutionInfo
	for {
		var err error
		if rows, err = p.svc.list(ctx, p.id, 2); err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		if p.settled(ctx, rows) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("visibility never showed the %d runs as describe does: %w", len(p.runs), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	var list []string
	for _, r := range rows {
		list = append(list, p.runLine(r.GetExecution().GetRunId(), r))
	}
	lines := []string{"visibility: " + strings.Join(list, ", ")}
	for _, runID := range p.runs {
		first, from, err := p.svc.started(ctx, p.id, runID)
		if err != nil {
			return nil, fmt.Errorf("started event of %s: %w", runID, err)
		}
		lines = append(lines, fmt.Sprintf("started %s: first=%s continued-from=%s", p.alias(runID), p.alias(first), p.alias(from)))
	}
	return lines, nil
}

// settled reports whether rows list every run the script saw, each with the status describe gives.
func (p *player) settled(ctx context.Context, rows []*workflowpb.WorkflowExecutionInfo) bool {
	if len(rows) != len(p.runs) {
		return false
	}
	for _, r := range rows {
		d, err := p.svc.describe(ctx, p.id, r.GetExecution().GetRunId())
		if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != r.GetStatus() {
			return false
		}
	}
	return true
}

// diverge returns the first step where model and server disagree, or "".
func diverge(model, real []string) string {
	for i := range real {
		if i >= len(model) || model[i] != real[i] {
			m := "<none>"
			if i < len(model) {
				m = model[i]
			}
			return fmt.Sprintf("step %d:\n  server: %s\n  model:  %s", i, real[i], m)
		}
	}
	return ""
}

// TestConformanceTemporalModel runs seeded operation scripts (starts with each conflict and reuse
// policy, retried starts, AlreadyStarted, terminates by run, current run and chain, terminates of
// closed and unknown runs, describes, out-of-band terminate, cancel, complete, fail and
// continue-as-new) against the real Temporal dev server and the model, and compares every answer
// and the state after every step, and at the end the visibility listing (its order and statuses, paged)
// and each run's started event (first run, continued from). The model with a planted bug (terminate ignores the run ID) must
// disagree: the comparison can fail.
func TestConformanceTemporalModel(t *testing.T) {
	srv := temporalx.Start(t, temporalx.Options{})
	c := temporalx.Client(t, srv)
	taskQueue := "sim-conformance"
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflowWithOptions(conformanceWorkflowFunc, workflow.RegisterOptions{Name: conformanceWorkflow})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	real := realService{c: c, namespace: srv.Namespace(), taskQueue: taskQueue}

	seeds, err := sim.ConformanceSeeds(6, 0xc0f0)
	if err != nil {
		t.Fatal(err)
	}
	steps := 30
	caught := 0
	for _, seed := range seeds {
		ops := script(seed, steps)
		id := fmt.Sprintf("sim-conformance-%x", seed)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		want, err := play(ctx, real, id, ops)
		cancel()
		if err != nil {
			t.Fatalf("seed %#x against the server: %v", seed, err)
		}
		got, err := play(t.Context(), modelService{temporalmodel.New(temporalmodel.Options{})}, id, ops)
		if err != nil {
			t.Fatalf("seed %#x against the model: %v", seed, err)
		}
		if d := diverge(got, want); d != "" {
			t.Errorf("seed %#x: the model disagrees with the server at %s", seed, d)
		}
		planted, err := play(t.Context(), modelService{temporalmodel.New(temporalmodel.Options{TerminateIgnoresRunID: true})}, id, ops)
		if err != nil || diverge(planted, want) != "" {
			caught++
		}
		if t.Failed() || testing.Verbose() {
			t.Logf("seed %#x:\n%s", seed, strings.Join(want, "\n"))
		}
	}
	if caught == 0 {
		t.Errorf("the planted model bug (terminate ignores the run ID) agreed with the server on all %d scripts: the comparison proves nothing", len(seeds))
	}
	t.Logf("%d scripts of %d steps agreed with the server; the planted bug was caught by %d", len(seeds), steps, caught)
}

package takeover_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/grpc"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tests/testkit"
	"github.com/baton-run/baton/takeover"
)

// current describes the workflow's current run: its run ID, status and owner (decoded with dc).
func current(t *testing.T, tc client.Client, dc converter.DataConverter, id string) (string, enumspb.WorkflowExecutionStatus, takeover.Owner) {
	t.Helper()
	resp, err := tc.DescribeWorkflowExecution(t.Context(), id, "")
	if err != nil {
		t.Fatalf("describe %s: %v", id, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	var owner takeover.Owner
	if p, ok := info.GetMemo().GetFields()[takeover.MemoKey]; ok {
		if err := dc.FromPayload(p, &owner); err != nil {
			t.Fatalf("memo of %s: %v", id, err)
		}
	}
	return info.GetExecution().GetRunId(), info.GetStatus(), owner
}

// requireOwnedBy fails unless the workflow's current run is run, running, with the term's token in its
// memo: the one check that tells the leader's run from any other open run.
func requireOwnedBy(t *testing.T, tc client.Client, run takeover.Run, term *election.Term) {
	t.Helper()
	runID, status, owner := current(t, tc, converter.GetDefaultDataConverter(), run.WorkflowID)
	if runID != run.RunID || status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || owner.Token != term.Token() {
		t.Fatalf("current run %s is %v with token %d; the leader's run is %s with token %d", runID, status, owner.Token, run.RunID, term.Token())
	}
}

// holdStarts holds the next StartWorkflowExecution request of a client until released, then sends it
// detached from its caller's cancellation: a request already on the wire, delayed in the network,
// that the server applies whatever became of its sender.
type holdStarts struct {
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func newHoldStarts() *holdStarts {
	h := &holdStarts{held: make(chan struct{}), release: make(chan struct{})}
	h.armed.Store(true)
	return h
}

func (h *holdStarts) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if strings.HasSuffix(method, "/StartWorkflowExecution") && h.armed.CompareAndSwap(true, false) {
		close(h.held)
		<-h.release
		ctx = context.WithoutCancel(ctx)
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// 7. A superseded leader's start, sent while its term held and applied by Temporal after its
// successor's start, never ends the successor's run, and the superseded takeover reports so.
func TestDelayedStartOfSupersededLeaderLeavesSuccessorsRun(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const queue = "delayed"
	testkit.RunClosingDispatcher(t, e.tc, takeover.DefaultTaskQueue(project, queue))
	hold := newHoldStarts()
	slow, err := e.temporal.NewClient(func(o *client.Options) {
		o.ConnectionOptions.DialOptions = append(o.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(hold.intercept))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	cfg := takeover.Config{WorkflowType: testkit.ClosingDispatcher}
	a := e.nodeOn(t, slow, "node-a", election.Config{}, cfg)
	b := e.node(t, "node-b", election.Config{}, cfg)
	operator := etcdClient(t, e)

	termA := a.campaign(t, queue)
	type result struct {
		run takeover.Run
		err error
	}
	resA := make(chan result, 1)
	go func() {
		run, err := a.mgr.Take(t.Context(), termA)
		resA <- result{run, err}
	}()
	select {
	case <-hold.held:
	case r := <-resA:
		t.Fatalf("node-a's takeover ended before its start was sent: %+v", r)
	}
	// While node-a's start is in flight, an operator revokes its lease and node-b takes over.
	revokeLeaseOf(t, operator, termA.Key())
	<-termA.Done()
	termB := b.campaign(t, queue)
	runB, err := b.mgr.Take(t.Context(), termB)
	if err != nil {
		t.Fatal(err)
	}
	// Past the server's minimal interval between two starts of one ID, so nothing but the conflict
	// policy decides what the late start does.
	olderThanReuseInterval(e.describe(t, runB.WorkflowID, runB.RunID).start)
	close(hold.release)
	r := <-resA
	if !errors.Is(r.err, takeover.ErrSuperseded) {
		t.Errorf("the superseded takeover returned %+v, %v; want ErrSuperseded", r.run, r.err)
	}
	requireOwnedBy(t, e.tc, runB, termB)
}

// 8. After continue-as-new, step-down ends the chain's current run (not the closed first run), and
// Watch follows the chain.
func TestStepDownAfterContinueAsNew(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const queue = "continuing"
	testkit.RunClosingDispatcher(t, e.tc, takeover.DefaultTaskQueue(project, queue))
	a := e.node(t, "node-a", election.Config{}, takeover.Config{WorkflowType: testkit.ClosingDispatcher})
	term := a.campaign(t, queue)
	run, err := a.mgr.Take(t.Context(), term)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.tc.SignalWorkflow(t.Context(), run.WorkflowID, run.RunID, testkit.SignalClose, "continue"); err != nil {
		t.Fatal(err)
	}
	var next string
	harness.Eventually(t, 30*time.Second, "the run continues as new", func() error {
		id, status, _ := current(t, e.tc, converter.GetDefaultDataConverter(), run.WorkflowID)
		if next = id; id == run.RunID || status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			return fmt.Errorf("current run %s is %v", id, status)
		}
		return nil
	})

	watched, err := a.mgr.Watch(t.Context(), term, run)
	if err != nil || watched.RunID != next || watched.FirstRunID != run.RunID {
		t.Fatalf("Watch = %+v, %v; want the continued run %s of the chain %s", watched, err, next, run.RunID)
	}
	if err := a.mgr.StepDown(t.Context(), term, run); err != nil {
		t.Fatal(err)
	}
	if st := e.describe(t, run.WorkflowID, next).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("step-down left the continued run %v: the chain runs on with no owner", st)
	}
}

// 9. Watch reports every kind of close that is not a continuation, and a new Take in the same term
// replaces the run.
func TestWatchReportsOutOfBandCloses(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const queue = "closes"
	testkit.RunClosingDispatcher(t, e.tc, takeover.DefaultTaskQueue(project, queue))
	a := e.node(t, "node-a", election.Config{}, takeover.Config{WorkflowType: testkit.ClosingDispatcher})
	term := a.campaign(t, queue)
	closers := []struct {
		want  enumspb.WorkflowExecutionStatus
		close func(run takeover.Run) error
	}{
		{enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, func(r takeover.Run) error {
			return e.tc.TerminateWorkflow(t.Context(), r.WorkflowID, r.RunID, "operator")
		}},
		{enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED, func(r takeover.Run) error {
			return e.tc.CancelWorkflow(t.Context(), r.WorkflowID, r.RunID)
		}},
		{enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, func(r takeover.Run) error {
			return e.tc.SignalWorkflow(t.Context(), r.WorkflowID, r.RunID, testkit.SignalClose, "complete")
		}},
		{enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, func(r takeover.Run) error {
			return e.tc.SignalWorkflow(t.Context(), r.WorkflowID, r.RunID, testkit.SignalClose, "fail")
		}},
	}
	for _, c := range closers {
		run, err := a.mgr.Take(t.Context(), term)
		if err != nil {
			t.Fatal(err)
		}
		requireOwnedBy(t, e.tc, run, term)
		watched := make(chan error, 1)
		go func() {
			_, err := a.mgr.Watch(t.Context(), term, run)
			watched <- err
		}()
		if err := c.close(run); err != nil {
			t.Fatal(err)
		}
		var closed *takeover.ClosedError
		select {
		case err := <-watched:
			if !errors.As(err, &closed) || closed.Status != c.want || closed.RunID != run.RunID {
				t.Fatalf("Watch = %v, want a %v close of %s", err, c.want, run.RunID)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("Watch never saw the %v close", c.want)
		}
		olderThanReuseInterval(e.describe(t, run.WorkflowID, run.RunID).start)
	}
}

// 10. A run with a higher token than a term etcd confirms (etcd revisions went back: a restore without
// --bump-revision) is a history regression: the takeover replaces it instead of holding the term with
// no dispatcher.
func TestHigherTokenUnderAConfirmedTermIsReplaced(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const queue = "restored"
	testkit.RunClosingDispatcher(t, e.tc, takeover.DefaultTaskQueue(project, queue))
	id, _ := takeover.WorkflowID(project, queue)
	future := takeover.Owner{Project: project, Queue: queue, ServerID: "before-restore", Token: 1 << 40}
	stale, err := e.tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: queue,
		Memo: map[string]any{takeover.MemoKey: future}}, testkit.ClosingDispatcher, future)
	if err != nil {
		t.Fatal(err)
	}
	olderThanReuseInterval(e.describe(t, id, stale.GetRunID()).start)
	a := e.node(t, "node-a", election.Config{}, takeover.Config{WorkflowType: testkit.ClosingDispatcher})
	term := a.campaign(t, queue)
	run, err := a.mgr.Take(t.Context(), term)
	if err != nil {
		t.Fatalf("takeover under a confirmed term against a higher stored token: %v", err)
	}
	requireOwnedBy(t, e.tc, run, term)
	if st := e.describe(t, id, stale.GetRunID()).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("the regressed run is %v", st)
	}
}

// 11. An application whose client encodes payloads (a codec): with the client's data converter the
// owner is read and the term's own run reused; without it the takeover fails closed instead of reading
// every token as 0.
func TestOwnerMemoReadWithTheClientsConverter(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const queue = "encoded"
	dc := converter.NewCodecDataConverter(converter.GetDefaultDataConverter(),
		converter.NewZlibCodec(converter.ZlibCodecOptions{AlwaysEncode: true}))
	tc, err := e.temporal.NewClient(func(o *client.Options) { o.DataConverter = dc })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	testkit.RunClosingDispatcher(t, tc, takeover.DefaultTaskQueue(project, queue))
	a := e.nodeOn(t, tc, "node-a", election.Config{}, takeover.Config{WorkflowType: testkit.ClosingDispatcher, DataConverter: dc})
	term := a.campaign(t, queue)
	run, err := a.mgr.Take(t.Context(), term)
	if err != nil {
		t.Fatal(err)
	}
	olderThanReuseInterval(e.describe(t, run.WorkflowID, run.RunID).start)
	again, err := a.mgr.Take(t.Context(), term)
	if err != nil || again.Path != takeover.PathReused || again.RunID != run.RunID {
		t.Fatalf("second takeover in the same term = %+v, %v; want the term's own run reused", again, err)
	}
	blind, err := takeover.New(tc, takeover.Config{WorkflowType: testkit.ClosingDispatcher})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := blind.Take(t.Context(), term); !errors.Is(err, takeover.ErrUnreadableOwner) || !errors.Is(err, takeover.ErrPermanent) {
		t.Fatalf("takeover without the client's converter = %v, want ErrUnreadableOwner (permanent)", err)
	}
	if id, st, _ := current(t, tc, dc, run.WorkflowID); id != run.RunID || st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("a takeover that could not read the owner touched the run: current %s %v", id, st)
	}
}

// pausedAfterStart is a real term whose process pauses (SIGSTOP, a stalled VM) right after etcd
// confirmed it once more behind its dispatcher start: from then on its local check fails, as a term's
// does when the pause outlived the lease. Nothing else about the term is faked.
type pausedAfterStart struct {
	*election.Term
	started, paused atomic.Bool
}

func (p *pausedAfterStart) Confirm(ctx context.Context) error {
	err := p.Term.Confirm(ctx)
	if p.started.Load() {
		p.paused.Store(true)
	}
	return err
}

func (p *pausedAfterStart) Check() error {
	if p.paused.Load() {
		return fmt.Errorf("%w: paused past the lease", election.ErrSessionLost)
	}
	return p.Term.Check()
}

// 12. A takeover whose term ended while its last confirmation was on the way (the process paused
// after etcd answered) does not report success: it reports ErrSuperseded and ends the run it
// started, by that run's ID, so that no run is left carrying an owner that no longer leads.
func TestTakeoverConfirmedBeforeAPauseDoesNotSucceed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const queue = "paused"
	testkit.RunClosingDispatcher(t, e.tc, takeover.DefaultTaskQueue(project, queue))
	term := &pausedAfterStart{}
	var runID atomic.Value
	seeStarts, err := e.temporal.NewClient(func(o *client.Options) {
		o.ConnectionOptions.DialOptions = append(o.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(
			func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
				err := invoker(ctx, method, req, reply, cc, opts...)
				if r, ok := reply.(interface{ GetRunId() string }); ok && err == nil && strings.HasSuffix(method, "/StartWorkflowExecution") {
					runID.Store(r.GetRunId())
					term.started.Store(true)
				}
				return err
			}))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(seeStarts.Close)
	a := e.nodeOn(t, seeStarts, "node-a", election.Config{}, takeover.Config{WorkflowType: testkit.ClosingDispatcher})
	term.Term = a.campaign(t, queue)

	run, err := a.mgr.Take(t.Context(), term)
	if !errors.Is(err, takeover.ErrSuperseded) {
		t.Fatalf("the takeover returned %+v, %v; want ErrSuperseded", run, err)
	}
	started, _ := runID.Load().(string)
	if started == "" {
		t.Fatal("the takeover never started a run")
	}
	id, err := takeover.WorkflowID(project, queue)
	if err != nil {
		t.Fatal(err)
	}
	if st := e.describe(t, id, started).status; st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("the run the paused term started is %v; want it terminated by its run ID", st)
	}
}

package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap/zaptest"
	"google.golang.org/grpc"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// heldCall holds the first request of one gRPC method sent through its client in flight until
// release is closed, then delivers it: a call that reaches Temporal late.
type heldCall struct {
	method  string
	once    sync.Once
	held    chan struct{} // closed when the request is held
	release chan struct{}
}

func newHeldCall(method string) *heldCall {
	return &heldCall{method: method, held: make(chan struct{}), release: make(chan struct{})}
}

// newHeldStart holds the first StartWorkflowExecution: a superseded leader's start that lands late.
func newHeldStart() *heldCall {
	return newHeldCall(workflowservice.WorkflowService_StartWorkflowExecution_FullMethodName)
}

func (h *heldCall) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == h.method {
		first := false
		h.once.Do(func() { first = true })
		if first {
			// The request is on the wire: the caller giving up (its term ended) does not stop it, and
			// its answer still comes back.
			close(h.held)
			select {
			case <-h.release:
			case <-time.After(time.Minute):
			}
			return invoker(context.WithoutCancel(ctx), method, req, reply, cc, opts...)
		}
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// waitHeld waits until h holds its call.
func (h *heldCall) waitHeld(t *testing.T, who string) {
	t.Helper()
	select {
	case <-h.held:
	case <-t.Context().Done():
		t.Fatalf("%s's %s was never sent", who, h.method)
	}
}

// heldClient returns a client of the test's Temporal server whose calls go through holds.
func heldClient(t *testing.T, holds ...*heldCall) client.Client {
	t.Helper()
	var ics []grpc.UnaryClientInterceptor
	for _, h := range holds {
		ics = append(ics, h.intercept)
	}
	c, err := temporalServer.NewClient(func(o *client.Options) {
		o.ConnectionOptions.DialOptions = append(o.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(ics...))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A superseded leader's late start must not hide a predecessor from the carry-over. node-a's start
// is held in flight while node-a's term ends; node-b takes over, its run R_B accepts three requests
// (no worker runs yet) and node-b steps down gracefully, terminating R_B; node-a's start then lands
// while no run is open, and node-a's post-start check ends that run by its own run ID, but it stays
// the workflow ID's latest run. node-c takes over naming that late run as its prior, whose own prior
// predates R_B. Every request R_B accepted must still be handled, once.
func TestLateStartDoesNotHideAPredecessor(t *testing.T) {
	e := newEnv(t)
	hold := newHeldStart()
	late := heldClient(t, hold)
	mgrA := e.managerWith(t, late, takeover.Config{Logger: zaptest.NewLogger(t).Named("node-a"), AttemptTimeout: time.Minute})

	_, termA := e.ownerOf(t, "node-a")
	type result struct {
		run takeover.Run
		err error
	}
	tookA := make(chan result, 1)
	go func() {
		run, err := mgrA.Take(t.Context(), termA)
		tookA <- result{run, err}
	}()
	hold.waitHeld(t, "node-a")
	// node-a's term ends while its start is in flight.
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}

	runB, termB := e.take(t, "node-b")
	var keys []string
	for i := range 3 {
		r := request(fmt.Sprintf("accepted-by-b-%d", i))
		keys = append(keys, r.Key())
		e.signal(t, r)
	}
	if err := e.manager(t, "node-b").StepDown(t.Context(), termB, runB); err != nil {
		t.Fatal(err)
	}
	if err := termB.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}

	// node-a's start lands now, with no run open: Temporal accepts it, node-a's post-start check
	// finds its term gone and ends that run by its own run ID.
	close(hold.release)
	a := <-tookA
	if !errors.Is(a.err, takeover.ErrSuperseded) {
		t.Fatalf("node-a's takeover = %+v, %v; want ErrSuperseded after its late start", a.run, a.err)
	}
	desc, err := e.tc.DescribeWorkflowExecution(t.Context(), runB.WorkflowID, "")
	if err != nil {
		t.Fatal(err)
	}
	lateRun := desc.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	if lateRun == runB.RunID {
		t.Fatalf("the workflow's latest run is R_B %s: node-a's late start never landed", runB.RunID)
	}

	runC, _ := e.take(t, "node-c")
	if runC.Owner.PriorRunID != lateRun {
		t.Fatalf("node-c's prior run = %s, want node-a's late run %s", runC.Owner.PriorRunID, lateRun)
	}
	h := e.worker(t)
	recs := e.waitDone(t, keys)
	onceEach(t, h, keys)
	for _, k := range keys {
		if recs[k] != record("done", runC.Owner) {
			t.Errorf("record %s = %q, want done by node-c", k, recs[k])
		}
	}
	st := e.state(t, e.runOf(t, runC), func(s dispatcher.State) bool { return s.Dispatched == 3 })
	if st.CarriedOver < 3 {
		t.Errorf("state %+v: want R_B's 3 requests carried over", st)
	}
}

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

// heldStart holds the first StartWorkflowExecution request sent through its client in flight until
// release is closed, then delivers it: a superseded leader's start that reaches Temporal late.
type heldStart struct {
	once    sync.Once
	held    chan struct{} // closed when the request is held
	release chan struct{}
}

func newHeldStart() *heldStart {
	return &heldStart{held: make(chan struct{}), release: make(chan struct{})}
}

func (h *heldStart) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
	invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if method == workflowservice.WorkflowService_StartWorkflowExecution_FullMethodName {
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

// A superseded leader's late start must not hide a predecessor from the carry-over. node-a's start
// is held in flight while node-a's term ends; node-b takes over, its run R_B accepts three requests
// (no worker runs yet) and node-b steps down gracefully, terminating R_B; node-a's start then lands
// while no run is open, and node-a's post-start check ends that run by its own run ID, but it stays
// the workflow ID's latest run. node-c takes over naming that late run as its prior, whose own prior
// predates R_B. Every request R_B accepted must still be handled, once.
func TestLateStartDoesNotHideAPredecessor(t *testing.T) {
	e := newEnv(t)
	hold := newHeldStart()
	late, err := temporalServer.NewClient(func(o *client.Options) {
		o.ConnectionOptions.DialOptions = append(o.ConnectionOptions.DialOptions, grpc.WithChainUnaryInterceptor(hold.intercept))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(late.Close)
	mgrA, err := takeover.New(late, takeover.Config{Logger: zaptest.NewLogger(t).Named("node-a"), AttemptTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

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
	select {
	case <-hold.held:
	case <-t.Context().Done():
		t.Fatal("node-a's start was never sent")
	}
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

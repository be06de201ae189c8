package node_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// slowHandler takes d for every request, whatever its context says (a call to a slow system that
// cannot be interrupted), and records every call and how many ran at once.
type slowHandler struct {
	d       time.Duration
	started chan struct{} // closed by the first call

	mu          sync.Mutex
	calls       map[string][]string // key -> the server IDs of its calls, in order
	inFlight    int
	maxInFlight int
}

func newSlowHandler(d time.Duration) *slowHandler {
	return &slowHandler{d: d, started: make(chan struct{}), calls: map[string][]string{}}
}

func (h *slowHandler) handle(_ context.Context, key string, _ dispatcher.Request, owner takeover.Owner) error {
	h.mu.Lock()
	h.calls[key] = append(h.calls[key], owner.ServerID)
	if len(h.calls) == 1 && len(h.calls[key]) == 1 {
		close(h.started)
	}
	h.inFlight++
	h.maxInFlight = max(h.maxInFlight, h.inFlight)
	h.mu.Unlock()
	time.Sleep(h.d)
	h.mu.Lock()
	h.inFlight--
	h.mu.Unlock()
	return nil
}

// result returns the calls of key, how many calls are running now, and the most that ran at once.
func (h *slowHandler) result(key string) (calls []string, inFlight, maxInFlight int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.calls[key]...), h.inFlight, h.maxInFlight
}

// Every planned move hands a queue over only once the handler running in its leader's run has
// finished, with Baton's default quiesce and resign bounds: a 3 s handler across a Node.Stop (with no
// Node.Quiesce before it), a registry drain and an operator's transfer runs once, by the leader that
// began it, and never beside a second attempt. (Before, the quiesce ran inside the election's resign,
// bounded by ResignTimeout (2 s), and waited half of that: the successor took the pending record over
// after 1 s and ran the handler again while the first call was still running.) An 8 s handler outlasts
// the quiesce (5 s): the successor may run it again, but only once the first call has returned (the
// attempt's claim in the ledger); before, the two ran at once.
func TestPlannedMovesLetASlowHandlerFinish(t *testing.T) {
	stop := func(t *testing.T, _ *env, _ *baton.Node, stopA func() error, _, _ string) {
		if err := stopA(); err != nil {
			t.Fatal(err)
		}
	}
	drain := func(t *testing.T, _ *env, a *baton.Node, _ func() error, _, queue string) {
		if err := a.Registry().Drain(t.Context(), queue, a.Config().ServerID); err != nil {
			t.Fatal(err)
		}
	}
	transfer := func(t *testing.T, e *env, _ *baton.Node, _ func() error, p, queue string) {
		keys := balance.Keys{ElectionPrefix: election.DefaultConfig().Prefix}
		if _, err := balance.RequestTransfer(t.Context(), etcdx.Client(t, e.etcd), keys, p, queue,
			balance.TransferRequest{To: "move-b"}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name       string
		move       func(t *testing.T, e *env, a *baton.Node, stopA func() error, p, queue string)
		handler    time.Duration
		againAfter bool   // the handler outlasts the quiesce: a second call is allowed, after the first
		reason     string // why move-b counts the queue won (balance.MetricOwnerChanges)
	}{
		{"stop", stop, 3 * time.Second, false, balance.ReasonResign},
		{"drain", drain, 3 * time.Second, false, balance.ReasonDrain},
		{"transfer", transfer, 3 * time.Second, false, balance.ReasonTransfer},
		{"stop-8s-handler", stop, 8 * time.Second, true, balance.ReasonResign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			p, queue := project()+"-"+tc.name, "slow"
			h := newSlowHandler(tc.handler)
			e.dispatchWorker(t, p, queue, e.ledger(t), h.handle)
			// Baton's defaults for everything a planned move waits on (quiesce, resign); fast's shorter
			// TTL and intervals only speed up the start.
			a, stopA := e.stoppableNode(t, fast(p, "move-a", queue), e.tc)
			runA := e.ownedRun(t, a, queue, "move-a leads with an open run", nil)
			reader := metric.NewManualReader()
			cfgB := fast(p, "move-b", queue)
			cfgB.MeterProvider = metric.NewMeterProvider(metric.WithReader(reader))
			b, _ := e.stoppableNode(t, cfgB, e.tc)

			req := dispatcher.Request{Type: "slow", TaskID: "slow-1", PayloadSHA256: fmt.Sprintf("%064x", 1)}
			if err := e.tc.SignalWorkflow(t.Context(), runA.WorkflowID, "", dispatcher.SignalDispatch, req); err != nil {
				t.Fatal(err)
			}
			select {
			case <-h.started:
			case <-time.After(time.Minute):
				t.Fatal("move-a's handler never started")
			}
			tc.move(t, e, a, stopA, p, queue)
			e.ownedRun(t, b, queue, "move-b leads with an open run", nil)

			// Done in the ledger and no call running: no further call can begin (the ledger's Begin of a
			// done key is refused), so the calls counted are all there will be.
			cli := etcdx.Client(t, e.etcd)
			eventually(t, time.Minute, "the request done and no handler running", func() error {
				rec, _, err := ledger.ReadRecord(t.Context(), cli, "", p, req.Key())
				if err != nil {
					return err
				}
				if rec.State != ledger.Done {
					return fmt.Errorf("record %+v", rec)
				}
				if _, inFlight, _ := h.result(req.Key()); inFlight > 0 {
					return errors.New("a handler call is still running")
				}
				return nil
			})
			calls, _, most := h.result(req.Key())
			if most != 1 {
				t.Errorf("%s with a %v handler in flight: %d calls %v ran at once; want one at a time", tc.name, tc.handler, most, calls)
			}
			if !tc.againAfter && len(calls) != 1 {
				t.Errorf("%s with a %v handler in flight: handler called %d times %v; want once, by move-a", tc.name, tc.handler, len(calls), calls)
			}
			// A planned move is counted as one, however long its quiesce took (before, a hand-off that
			// used the whole QuiesceTimeout outlived the hint's memory and was counted as a crash).
			if got := counterBy(t, reader, balance.MetricOwnerChanges, "reason"); !maps.Equal(got, map[string]int{tc.reason: 1}) {
				t.Errorf("%s: move-b counted owner changes %v, want {%s: 1}", tc.name, got, tc.reason)
			}
		})
	}
}

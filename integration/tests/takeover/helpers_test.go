package takeover_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

const project = "billing"

// env is one test's real servers: etcd and Temporal, in-process.
type env struct {
	etcd     *etcdx.Cluster
	temporal *temporalx.Server
	tc       client.Client
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{etcd: etcdx.Start(t, etcdx.Options{}), temporal: temporalx.Start(t, temporalx.Options{})}
	e.tc = temporalx.Client(t, e.temporal)
	return e
}

// node is one simulated worker process: its own etcd client, Elector and takeover Manager.
type node struct {
	id  string
	el  *election.Elector
	mgr *takeover.Manager
}

func (e *env) node(t *testing.T, id string, ecfg election.Config, tcfg takeover.Config) *node {
	t.Helper()
	return e.nodeOn(t, e.tc, id, ecfg, tcfg)
}

// nodeOn is node with its own Temporal client (one that delays requests, or encodes payloads).
func (e *env) nodeOn(t *testing.T, tc client.Client, id string, ecfg election.Config, tcfg takeover.Config) *node {
	t.Helper()
	cli := etcdx.Client(t, e.etcd)
	log := zaptest.NewLogger(t).Named(id)
	ecfg.Logger, tcfg.Logger = log, log
	el, err := election.New(cli, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		_ = el.Close(ctx)
	})
	mgr, err := takeover.New(tc, tcfg)
	if err != nil {
		t.Fatal(err)
	}
	return &node{id: id, el: el, mgr: mgr}
}

func (n *node) campaign(t *testing.T, queue string) *election.Term {
	t.Helper()
	term, err := n.el.Campaign(t.Context(), project, queue, n.id)
	if err != nil {
		t.Fatalf("%s: campaign %s: %v", n.id, queue, err)
	}
	return term
}

// handled counts the dispatcher's handler calls per dispatch key.
type handled struct {
	mu    sync.Mutex
	calls map[string]int
}

func (h *handled) handle(_ context.Context, key string, _ dispatcher.Request, _ takeover.Owner) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls[key]++
	return nil
}

func (h *handled) count(key string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[key]
}

// worker runs the reference dispatcher on queue with an etcd ledger.
func (e *env) worker(t *testing.T, queue string) *handled {
	t.Helper()
	dl, err := ledger.New(etcdx.Client(t, e.etcd), ledger.Config{Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	h := &handled{calls: map[string]int{}}
	w := worker.New(e.tc, takeover.DefaultTaskQueue(project, queue), worker.Options{})
	dispatcher.Register(w, &dispatcher.Activities{Ledger: dl, Handler: h.handle, History: e.tc})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		w.Stop()
		// The SDK keeps cached workflow runs (and their goroutines) process-wide after a worker stops.
		worker.PurgeStickyWorkflowCache()
	})
	return h
}

type runInfo struct {
	status       enumspb.WorkflowExecutionStatus
	start, close time.Time
}

func (e *env) describe(t *testing.T, id, runID string) runInfo {
	t.Helper()
	resp, err := e.tc.DescribeWorkflowExecution(t.Context(), id, runID)
	if err != nil {
		t.Fatalf("describe %s/%s: %v", id, runID, err)
	}
	info := resp.GetWorkflowExecutionInfo()
	return runInfo{status: info.GetStatus(), start: info.GetStartTime().AsTime(), close: info.GetCloseTime().AsTime()}
}

// closeEvent returns the last event of a closed run's history.
func (e *env) closeEvent(t *testing.T, id, runID string) *historypb.HistoryEvent {
	t.Helper()
	iter := e.tc.GetWorkflowHistory(t.Context(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
	var last *historypb.HistoryEvent
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatalf("history of %s/%s: %v", id, runID, err)
		}
		last = ev
	}
	if last == nil {
		t.Fatalf("%s/%s has no close event", id, runID)
	}
	return last
}

// runsOf lists every run of id that visibility knows, waiting until it knows want of them.
func (e *env) runsOf(t *testing.T, id string, want int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var runs []string
		var token []byte
		for {
			resp, err := e.tc.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
				Query: fmt.Sprintf("WorkflowId = '%s'", id), NextPageToken: token,
			})
			if err != nil {
				t.Fatal(err)
			}
			for _, ex := range resp.GetExecutions() {
				runs = append(runs, ex.GetExecution().GetRunId())
			}
			if token = resp.GetNextPageToken(); len(token) == 0 {
				break
			}
		}
		if len(runs) >= want || time.Now().After(deadline) {
			return runs
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// olderThanReuseInterval waits until a run started at start is more than a second old: Temporal
// refuses to start the same workflow ID again within about a second of the previous start, and the
// "one attempt" assertions are about Baton, not that server guard.
func olderThanReuseInterval(start time.Time) {
	if d := time.Until(start.Add(1100 * time.Millisecond)); d > 0 {
		time.Sleep(d)
	}
}

package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

const project = "billing"

// ledgerPrefix is each test's own ledger prefix, so a test can list exactly what it wrote.
const ledgerPrefix = "/test/dispatch"

// env is one test's etcd, a client of the shared Temporal server, and the test's task queue.
type env struct {
	etcd  *etcdx.Cluster
	cli   *clientv3.Client
	tc    client.Client
	queue string
	// historyReader is the workers' history reader; nil means tc.
	historyReader dispatcher.HistoryReader
}

func newEnv(t *testing.T) *env {
	t.Helper()
	return newEnvOn(t, temporalServer)
}

// newEnvOn is newEnv on a Temporal server of the test's own.
func newEnvOn(t *testing.T, srv *temporalx.Server) *env {
	t.Helper()
	e := &env{etcd: etcdx.Start(t, etcdx.Options{}), tc: temporalx.Client(t, srv)}
	e.cli = etcdx.Client(t, e.etcd)
	e.queue = strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	return e
}

// ownerOf campaigns for the test's queue as serverID with its own elector (its own etcd session,
// as a separate process would) and returns the Owner a takeover would hand its run, with the term.
func (e *env) ownerOf(t *testing.T, serverID string) (takeover.Owner, *election.Term) {
	t.Helper()
	el, err := election.New(etcdx.Client(t, e.etcd), election.Config{Logger: zaptest.NewLogger(t).Named(serverID)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		_ = el.Close(ctx)
	})
	term, err := el.Campaign(t.Context(), project, e.queue, serverID)
	if err != nil {
		t.Fatalf("%s: campaign: %v", serverID, err)
	}
	return takeover.Owner{Project: project, Queue: e.queue, ServerID: serverID, Token: term.Token(),
		ElectionKey: term.Key(), TakeoverStartedAt: term.Started()}, term
}

// ledger returns an etcd ledger under the test's prefix.
func (e *env) ledger(t *testing.T) *ledger.Etcd {
	t.Helper()
	l, err := ledger.New(e.cli, ledger.Config{Prefix: ledgerPrefix, Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// records lists the ledger's records: key (without the prefix) -> value; the attempts' claims
// (ledger.AttemptKey) are not records.
func (e *env) records(t *testing.T) map[string]string {
	t.Helper()
	out, _, err := ledger.Read(t.Context(), e.cli, ledgerPrefix, project)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// call is one handler call.
type call struct {
	key   string
	owner takeover.Owner
	at    time.Time
}

// handled records the dispatcher's handler calls. block, when set, is called first (outside the
// lock) and may hold the call.
// holdNodeA returns a handler whose dispatches by node-a are held until release is closed (or
// their context ends), and a channel closed when the first of them started.
func holdNodeA() (h *handled, started <-chan struct{}, release chan struct{}) {
	first, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	h = &handled{block: func(ctx context.Context, _ string, o takeover.Owner) {
		if o.ServerID != "node-a" {
			return
		}
		once.Do(func() { close(first) })
		select {
		case <-release:
		case <-ctx.Done():
		}
	}}
	return h, first, release
}

type handled struct {
	mu    sync.Mutex
	calls []call
	block func(ctx context.Context, key string, owner takeover.Owner)
}

func (h *handled) handle(ctx context.Context, key string, _ dispatcher.Request, owner takeover.Owner) error {
	if h.block != nil {
		h.block(ctx, key, owner)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, call{key, owner, time.Now()})
	return nil
}

func (h *handled) snapshot() []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]call(nil), h.calls...)
}

// perKey counts the handler calls per dispatch key.
func (h *handled) perKey() map[string]int {
	out := map[string]int{}
	for _, c := range h.snapshot() {
		out[c.key]++
	}
	return out
}

// worker runs the reference dispatcher on the test's task queue with the etcd ledger.
func (e *env) worker(t *testing.T) *handled {
	t.Helper()
	h := &handled{}
	e.workerWith(t, h, dispatcher.RegisterOptions{})
	return h
}

// workerWith runs the reference dispatcher with h and opts (and the Temporal client as its history
// reader, as a real worker has) until the returned stop is called or the test ends.
func (e *env) workerWith(t *testing.T, h *handled, opts dispatcher.RegisterOptions) (stop func()) {
	t.Helper()
	w := worker.New(e.tc, takeover.DefaultTaskQueue(project, e.queue), worker.Options{})
	var history dispatcher.HistoryReader = e.tc
	if e.historyReader != nil {
		history = e.historyReader
	}
	acts := &dispatcher.Activities{Ledger: e.ledger(t), Handler: h.handle, History: history}
	if err := dispatcher.RegisterWithOptions(w, acts, opts); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			w.Stop()
			// The SDK keeps cached workflow runs (and their goroutines) process-wide after a worker stops.
			worker.PurgeStickyWorkflowCache()
		})
	}
	t.Cleanup(stop)
	return stop
}

// manager returns a takeover Manager for serverID on the test's Temporal client, as a node has.
func (e *env) manager(t *testing.T, serverID string) *takeover.Manager {
	t.Helper()
	return e.managerWith(t, e.tc, takeover.Config{Logger: zaptest.NewLogger(t).Named(serverID)})
}

// managerWith returns a takeover Manager on tc with cfg, keeping its run log in the test's etcd, as a
// node does.
func (e *env) managerWith(t *testing.T, tc client.Client, cfg takeover.Config) *takeover.Manager {
	t.Helper()
	rl, err := takeover.NewEtcdRunLog(e.cli, "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.RunLog = rl
	m, err := takeover.New(tc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// take campaigns as serverID and takes the dispatcher over with a real term, as a node does: the
// prior run is terminated by its run ID and the new run names it as its PriorRunID.
func (e *env) take(t *testing.T, serverID string) (takeover.Run, *election.Term) {
	t.Helper()
	_, term := e.ownerOf(t, serverID)
	run, err := e.manager(t, serverID).Take(t.Context(), term)
	if err != nil {
		t.Fatalf("%s: take over: %v", serverID, err)
	}
	t.Cleanup(func() {
		_ = e.tc.TerminateWorkflow(context.WithoutCancel(t.Context()), run.WorkflowID, run.RunID, "test over")
	})
	return run, term
}

// runOf returns a handle on run (on the chain's current run when run.RunID is empty).
func (e *env) runOf(t *testing.T, run takeover.Run) client.WorkflowRun {
	t.Helper()
	return e.tc.GetWorkflow(t.Context(), run.WorkflowID, run.RunID)
}

// signal sends req to the queue's dispatcher, fire-and-forget, to whichever run is current.
func (e *env) signal(t *testing.T, req dispatcher.Request) {
	t.Helper()
	id, err := takeover.WorkflowID(project, e.queue)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.tc.SignalWorkflow(t.Context(), id, "", dispatcher.SignalDispatch, req); err != nil {
		t.Fatal(err)
	}
}

// waitDone waits until the ledger has every key in keys done, and returns the records.
func (e *env) waitDone(t *testing.T, keys []string) map[string]string {
	t.Helper()
	var recs map[string]string
	harness.Eventually(t, 2*time.Minute, fmt.Sprintf("%d ledger records done", len(keys)), func() error {
		recs = e.records(t)
		missing := 0
		for _, k := range keys {
			if !strings.HasPrefix(recs[k], "done ") {
				missing++
			}
		}
		if missing > 0 {
			return fmt.Errorf("%d of %d not done", missing, len(keys))
		}
		return nil
	})
	return recs
}

// onceEach fails the test unless the handler ran exactly once for every key in keys, and for no
// other key.
func onceEach(t *testing.T, h *handled, keys []string) {
	t.Helper()
	got := h.perKey()
	for _, k := range keys {
		if got[k] != 1 {
			t.Errorf("key %s handled %d times, want once", k, got[k])
		}
	}
	if len(got) != len(keys) {
		t.Errorf("handler saw %d keys, want %d", len(got), len(keys))
	}
}

// start starts a dispatcher run for owner directly, as a takeover would (input and memo), and
// returns it once its first workflow task ran (its state answers a query).
func (e *env) start(t *testing.T, owner takeover.Owner) client.WorkflowRun {
	t.Helper()
	id, err := takeover.WorkflowID(owner.Project, owner.Queue)
	if err != nil {
		t.Fatal(err)
	}
	run, err := e.tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{
		ID: id, TaskQueue: takeover.DefaultTaskQueue(project, e.queue), Memo: map[string]any{takeover.MemoKey: owner},
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
	}, dispatcher.WorkflowName, owner)
	if err != nil {
		t.Fatal(err)
	}
	e.state(t, run, func(dispatcher.State) bool { return true })
	t.Cleanup(func() {
		_ = e.tc.TerminateWorkflow(context.WithoutCancel(t.Context()), run.GetID(), run.GetRunID(), "test over")
	})
	return run
}

// state waits until the run's state satisfies ok, and returns it.
func (e *env) state(t *testing.T, run client.WorkflowRun, ok func(dispatcher.State) bool) dispatcher.State {
	t.Helper()
	var st dispatcher.State
	harness.Eventually(t, 30*time.Second, "dispatcher state of run "+run.GetRunID(), func() error {
		v, err := e.tc.QueryWorkflow(t.Context(), run.GetID(), run.GetRunID(), dispatcher.QueryState)
		if err != nil {
			return err
		}
		st = dispatcher.State{}
		if err := v.Get(&st); err != nil {
			return err
		}
		if !ok(st) {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
	return st
}

// activityOutcome waits until the run's first dispatch activity (Dispatch or DispatchBatch; the
// carry-over's Backlog activities are not counted) closed, and returns its ActivityTaskFailed event
// (nil when it completed) and the attempt that closed it.
func (e *env) activityOutcome(t *testing.T, run client.WorkflowRun) (*historypb.ActivityTaskFailedEventAttributes, int32) {
	t.Helper()
	var failed *historypb.ActivityTaskFailedEventAttributes
	var attempt int32
	harness.Eventually(t, 30*time.Second, "a dispatch activity of run "+run.GetRunID()+" closes", func() error {
		dispatch := map[int64]bool{} // scheduled event ID -> a dispatch activity
		iter := e.tc.GetWorkflowHistory(t.Context(), run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			ev, err := iter.Next()
			if err != nil {
				return err
			}
			if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() != dispatcher.ActivityBacklog {
				dispatch[ev.GetEventId()] = true
			}
			if a := ev.GetActivityTaskStartedEventAttributes(); a != nil && dispatch[a.GetScheduledEventId()] {
				attempt = a.GetAttempt()
			}
			if a := ev.GetActivityTaskFailedEventAttributes(); a != nil && dispatch[a.GetScheduledEventId()] {
				failed = a
				return nil
			}
			if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil && dispatch[a.GetScheduledEventId()] {
				return nil
			}
		}
		return fmt.Errorf("no dispatch activity closed yet")
	})
	return failed, attempt
}

func request(task string) dispatcher.Request {
	return dispatcher.Request{Type: "invoice", TaskID: task, PayloadSHA256: strings.Repeat("0f", 32), Parent: "session-7"}
}

func record(state string, o takeover.Owner) string {
	return fmt.Sprintf("%s %s %d", state, o.ServerID, o.Token)
}

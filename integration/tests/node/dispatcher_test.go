package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/tests/testkit"
	"github.com/baton-run/baton/takeover"
)

// startNode starts a Node over tc with cfg and stops it when the test ends.
func (e *env) startNode(t *testing.T, cfg baton.Config, tc client.Client) *baton.Node {
	t.Helper()
	n, _ := e.stoppableNode(t, cfg, tc)
	return n
}

// stoppableNode starts a Node over tc with cfg; stop stops it (once; the test's cleanup stops it
// otherwise, and fails the test if that stop fails).
func (e *env) stoppableNode(t *testing.T, cfg baton.Config, tc client.Client) (n *baton.Node, stop func() error) {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(cfg.ServerID)
	}
	n, err := baton.New(cfg, etcdx.Client(t, e.etcd), tc, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	stop = sync.OnceValue(func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), time.Minute)
		defer cancel()
		return n.Stop(ctx)
	})
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return n, stop
}

// ownedRun waits until node leads queue with an open run that Temporal shows as the workflow's
// current run, running, with the term's token in its memo, and returns the node's view of it.
func (e *env) ownedRun(t *testing.T, node *baton.Node, queue, what string, ok func(baton.QueueStatus) error) baton.QueueStatus {
	t.Helper()
	var qs baton.QueueStatus
	eventually(t, 60*time.Second, what, func() error {
		var leads bool
		if qs, leads = leading(node, queue); !leads || !qs.DispatcherOpen || qs.RunID == "" {
			return fmt.Errorf("status %+v", qs)
		}
		resp, err := e.tc.DescribeWorkflowExecution(t.Context(), qs.WorkflowID, "")
		if err != nil {
			return err
		}
		info := resp.GetWorkflowExecutionInfo()
		owner, _, err := takeover.DecodeOwner(nil, info.GetMemo())
		if err != nil {
			return err
		}
		if info.GetExecution().GetRunId() != qs.RunID || info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING || owner.Token != qs.Token {
			return fmt.Errorf("current run %s is %v with token %d; the leader says %s at token %d",
				info.GetExecution().GetRunId(), info.GetStatus(), owner.Token, qs.RunID, qs.Token)
		}
		if ok != nil {
			return ok(qs)
		}
		return nil
	})
	return qs
}

// A leader supervises its run for the whole term: a run that continues as new is followed (status and
// the heartbeat entry name the new run), and a run that an operator terminates or cancels, or that
// returns or fails, is replaced within the same term by a run that carries the term's token.
func TestLeaderReplacesRunsClosedBehindItsBack(t *testing.T) {
	e := newEnv(t)
	p := project()
	const queue = "orders"
	cfg := fast(p, "node-a", queue)
	cfg.Election.TTL = 5 * time.Second // a term that load cannot end: the test is about one term
	cfg.Takeover.WorkflowType = testkit.ClosingDispatcher
	testkit.RunClosingDispatcher(t, e.tc, takeover.DefaultTaskQueue(p, queue))
	node := e.startNode(t, cfg, e.tc)

	first := e.ownedRun(t, node, queue, "leading with an owned run", nil)
	if err := e.tc.SignalWorkflow(t.Context(), first.WorkflowID, first.RunID, testkit.SignalClose, "continue"); err != nil {
		t.Fatal(err)
	}
	continued := e.ownedRun(t, node, queue, "the continued run followed", func(qs baton.QueueStatus) error {
		if qs.RunID == first.RunID || qs.FirstRunID != first.RunID || qs.Token != first.Token {
			return fmt.Errorf("status %+v", qs)
		}
		entry, err := e.rdb.HGetAll(t.Context(), heartbeat.Key(node.Config().Heartbeat.Prefix, node.Config().Project, qs.WorkflowID)).Result()
		if err != nil {
			return err
		}
		if entry["run_id"] != qs.RunID {
			return fmt.Errorf("heartbeat entry names run %s, not the continued run %s", entry["run_id"], qs.RunID)
		}
		return nil
	})
	if continued.Replacements != 0 {
		t.Fatalf("continue-as-new counted as a replacement: %+v", continued)
	}

	closers := []struct {
		name  string
		close func(qs baton.QueueStatus) error
	}{
		{"terminated", func(qs baton.QueueStatus) error {
			return e.tc.TerminateWorkflow(t.Context(), qs.WorkflowID, qs.RunID, "operator")
		}},
		{"canceled", func(qs baton.QueueStatus) error { return e.tc.CancelWorkflow(t.Context(), qs.WorkflowID, qs.RunID) }},
		{"completed", func(qs baton.QueueStatus) error {
			return e.tc.SignalWorkflow(t.Context(), qs.WorkflowID, qs.RunID, testkit.SignalClose, "complete")
		}},
		{"failed", func(qs baton.QueueStatus) error {
			return e.tc.SignalWorkflow(t.Context(), qs.WorkflowID, qs.RunID, testkit.SignalClose, "fail")
		}},
	}
	prev := continued
	for i, c := range closers {
		if err := c.close(prev); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		prev = e.ownedRun(t, node, queue, "the "+c.name+" run replaced", func(qs baton.QueueStatus) error {
			if qs.RunID == prev.RunID || qs.Token != first.Token || qs.Replacements != i+1 {
				return fmt.Errorf("status %+v", qs)
			}
			return nil
		})
	}
	if err := node.Ready(); err != nil {
		t.Fatalf("Ready after the replacements = %v", err)
	}
}

// missingNamespace is a Temporal namespace that does not exist: every takeover on it fails for good.
const missingNamespace = "no-such-namespace"

// missingNamespaceClient is a client of the test's Temporal server on missingNamespace.
func missingNamespaceClient(t *testing.T) client.Client {
	t.Helper()
	tc, err := temporalServer.NewClient(func(o *client.Options) { o.Namespace = missingNamespace })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return tc
}

// A Temporal client on a namespace that does not exist: takeovers fail for good, so the Node backs off
// (no hot loop of campaign, fail, resign), says why in readiness, and etcd's revision grows slowly.
func TestWrongNamespaceBacksOffAndShowsInReadiness(t *testing.T) {
	e := newEnv(t)
	tc := missingNamespaceClient(t)
	reader := metric.NewManualReader()
	cfg := fast(project(), "node-a", "orders")
	cfg.Election = election.Config{TTL: 5 * time.Second}
	cfg.MeterProvider = metric.NewMeterProvider(metric.WithReader(reader))
	cli := etcdx.Client(t, e.etcd)
	before, err := cli.Get(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	node := e.startNode(t, cfg, tc)
	eventually(t, 30*time.Second, "readiness names the namespace", func() error {
		err := node.Ready()
		if !errors.Is(err, baton.ErrTakeoverFailing) || !strings.Contains(err.Error(), missingNamespace) {
			return fmt.Errorf("Ready = %v", err)
		}
		return nil
	})
	// The takeover is tried again: within the failing term, which is kept for a hold (ownership's
	// package doc), not given up after one attempt.
	eventually(t, 60*time.Second, "a second takeover attempt", func() error {
		if n := takeoverAttempts(t, reader); n < 2 {
			return fmt.Errorf("%d attempts", n)
		}
		return nil
	})
	start := time.Now()
	time.Sleep(8 * time.Second) // the window in which attempts are counted: load only makes them fewer
	window := time.Since(start)
	after, err := cli.Get(t.Context(), "/")
	if err != nil {
		t.Fatal(err)
	}
	attempts := takeoverAttempts(t, reader)
	// The held term retries with backoff (RetryMin doubling up to PermanentHold): after the first few,
	// at most one attempt per second.
	if limit := 6 + int(window.Seconds()); attempts > limit {
		t.Fatalf("%d takeover attempts in about %v: a hot loop (limit %d)", attempts, window.Round(time.Second), limit)
	}
	if growth := after.Header.Revision - before.Header.Revision; growth > int64(4*attempts+20) {
		t.Fatalf("etcd revision grew by %d for %d takeover attempts", growth, attempts)
	}
	t.Logf("%d takeover attempts, etcd revision +%d, readiness: %v", attempts, after.Header.Revision-before.Header.Revision, node.Ready())
}

// takeoverAttempts sums the baton.takeover counter over every outcome.
func takeoverAttempts(t *testing.T, reader metric.Reader) int {
	return counterSum(t, reader, takeover.MetricTakeovers)
}

// counterSum sums one counter of a process over every attribute set (0 before its first increment:
// the SDK reports a counter once it has been added to).
func counterSum(t *testing.T, reader metric.Reader, name string) int {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				total += int(dp.Value)
			}
		}
	}
	return total
}

// counterBy sums one counter of a process by the value of one attribute.
func counterBy(t *testing.T, reader metric.Reader, name, attr string) map[string]int {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(attr))
				out[v.String()] += int(dp.Value)
			}
		}
	}
	return out
}

// After an etcd history regression the queue's heartbeat entry holds a higher token than any term
// the restored etcd grants. The leader's heartbeat overwrites it once etcd confirms its term: the
// queue keeps its first leader and run, where giving way to the entry made it change hands every
// few seconds until the entry expired.
func TestHeartbeatRegressionDoesNotChurn(t *testing.T) {
	e := newEnv(t)
	p, queue := project(), "orders"
	id, err := takeover.WorkflowID(p, queue)
	if err != nil {
		t.Fatal(err)
	}
	key := heartbeat.Key("", p, id)
	if err := e.rdb.HSet(t.Context(), key, heartbeat.FieldWorkflowID, id, heartbeat.FieldRunID, "run-before-the-restore",
		heartbeat.FieldServerID, "node-old", heartbeat.FieldToken, int64(1)<<40, heartbeat.FieldProject, p, heartbeat.FieldQueue, queue,
		heartbeat.FieldUpdatedMs, time.Now().UnixMilli()).Err(); err != nil {
		t.Fatal(err)
	}
	a := e.startNode(t, fast(p, "node-a", queue), e.tc)
	first := e.ownedRun(t, a, queue, "node-a leads with its run", nil)
	e.startNode(t, fast(p, "node-b", queue), e.tc)
	// Twenty heartbeat intervals: each refused beat used to end the term.
	time.Sleep(4 * time.Second)
	now := e.ownedRun(t, a, queue, "node-a still leads", nil)
	if now.Token != first.Token || now.RunID != first.RunID {
		t.Fatalf("queue changed hands: first token %d run %s, now token %d run %s", first.Token, first.RunID, now.Token, now.RunID)
	}
	resp, err := e.tc.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowId = %q", id)})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(resp.GetExecutions()); n != 1 {
		t.Fatalf("%d dispatcher runs, want 1", n)
	}
	if got, _ := e.rdb.HGet(t.Context(), key, heartbeat.FieldToken).Result(); got != fmt.Sprint(first.Token) {
		t.Fatalf("heartbeat entry token %s, want the leader's %d", got, first.Token)
	}
}

package node_test

import (
	"cmp"
	"errors"
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/ownership"
)

// A namespace that does not exist, under a fleet: 3 workers serving the same 10 queues. Every
// takeover fails for good on every worker. The fleet must not pass the queues around as fast as etcd
// elects (issue 40: 318 etcd revisions in 3 s for 2 queues on 2 workers): the failing state is shared
// and the holder keeps its term for a hold that grows with the fleet's failed terms, so etcd's
// revision grows by at most 0.2 per second per queue, and every worker says in its readiness that
// the takeover cannot succeed.
func TestMissingNamespaceUnderAFleetBacksOff(t *testing.T) {
	e := newEnv(t)
	tc := missingNamespaceClient(t)
	const workers, nQueues = 3, 10
	queues := make([]string, nQueues)
	for i := range queues {
		queues[i] = fmt.Sprintf("q%d", i)
	}
	p := project()
	nodes := make([]*baton.Node, workers)
	readers := make([]*metric.ManualReader, workers)
	for i := range nodes {
		cfg := fast(p, fmt.Sprintf("node-%c", 'a'+i), queues...)
		cfg.Election = election.Config{TTL: 5 * time.Second}
		readers[i] = metric.NewManualReader()
		cfg.MeterProvider = metric.NewMeterProvider(metric.WithReader(readers[i]))
		// Every takeover fails: at Info the failures of today's hot loop would drown the test's log.
		cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)).Named(cfg.ServerID)
		nodes[i] = e.startNode(t, cfg, tc)
	}
	allRed := func() error {
		for i, n := range nodes {
			if err := n.Ready(); !errors.Is(err, baton.ErrTakeoverFailing) {
				return fmt.Errorf("worker %d: Ready = %v", i, err)
			}
		}
		return nil
	}
	eventually(t, 60*time.Second, "readiness red on every worker", allRed)

	cli := etcdx.Client(t, e.etcd)
	revision := func() int64 {
		resp, err := cli.Get(t.Context(), "/")
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	attempts := func() int {
		total := 0
		for _, r := range readers {
			total += takeoverAttempts(t, r)
		}
		return total
	}
	// The window measured begins half a hold in, so that it holds the first hand-overs of the failing
	// terms (the busiest 30 s: each later hold is twice as long). Load only makes the churn smaller.
	time.Sleep(ownership.DefaultPermanentHold / 2)
	before, attemptsBefore, start := revision(), attempts(), time.Now()
	time.Sleep(30 * time.Second)
	window := time.Since(start)
	growth, tried := revision()-before, attempts()-attemptsBefore
	perQueue := float64(growth) / window.Seconds() / nQueues
	t.Logf("%d workers x %d queues, namespace missing: etcd revision +%d in %v (%.3f per second per queue), %d takeover attempts",
		workers, nQueues, growth, window.Round(time.Millisecond), perQueue, tried)
	if perQueue > 0.2 {
		t.Errorf("etcd revision grew by %d in %v: %.2f per second per queue, want at most 0.2 (the fleet passes the failing queues around)",
			growth, window.Round(time.Millisecond), perQueue)
	}
	if tried == 0 {
		t.Errorf("no takeover attempt in %v: a failing queue must still be tried (a recovered namespace is taken over)", window.Round(time.Second))
	}
	if err := allRed(); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// A worker whose own configuration is broken (a namespace that does not exist) while the others'
// are fine: it keeps its failing term for one hold, then steps aside, and a worker that can take the
// dispatcher over leads the queue; its success deletes the queue's failing record.
func TestABrokenWorkerStepsAsideForAHealthyOne(t *testing.T) {
	e := newEnv(t)
	bad := missingNamespaceClient(t)
	const queue, hold = "orders", 3 * time.Second
	p := project()
	broken := fast(p, "broken", queue)
	broken.Ownership.PermanentHold = hold
	brokenNode := e.startNode(t, broken, bad)
	eventually(t, 30*time.Second, "the broken worker fails its takeover", func() error {
		if err := brokenNode.Ready(); !errors.Is(err, baton.ErrTakeoverFailing) {
			return fmt.Errorf("Ready = %v", err)
		}
		return nil
	})
	cli := etcdx.Client(t, e.etcd)
	record := ownership.FailingKeys{ElectionPrefix: cmp.Or(brokenNode.Config().Election.Prefix, election.DefaultConfig().Prefix)}.Queue(p, queue)
	// Readiness turns red as the takeover fails; the record is written right after, by the hold.
	eventually(t, 10*time.Second, "the failing record written", func() error {
		if resp, err := cli.Get(t.Context(), record); err != nil || len(resp.Kvs) != 1 {
			return fmt.Errorf("failing record %s: %v, %v", record, resp, err)
		}
		return nil
	})
	healthy := []*baton.Node{e.startNode(t, fast(p, "healthy-1", queue), e.tc), e.startNode(t, fast(p, "healthy-2", queue), e.tc)}
	eventually(t, 60*time.Second, "a healthy worker leads with a run", func() error {
		for _, n := range healthy {
			if _, ok := leading(n, queue); ok {
				return nil
			}
		}
		return fmt.Errorf("broken: %v", brokenNode.Ready())
	})
	eventually(t, 10*time.Second, "the failing record deleted", func() error {
		resp, err := cli.Get(t.Context(), record)
		if err != nil || len(resp.Kvs) != 0 {
			return fmt.Errorf("%v, %v", resp, err)
		}
		return nil
	})
}

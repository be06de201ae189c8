package node_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/takeover"
)

// A Temporal outage is seen by every worker at once: no worker can run a queue better than its
// leader, so no queue moves. Two nodes serve the same three queues; the server is stopped for far
// longer than UnfitAfter progress checks (every leader marks its queues unfit, every worker's reach
// check fails); no term begins meanwhile, each leader says why it keeps its queues, and once the
// server is back dispatch resumes on the same leaders, under the same terms.
func TestTemporalOutageMovesNoQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("stops a Temporal server of its own")
	}
	o := startOwnTemporal(t, nil)
	srv, e, p, queues, seen, nodes, cfg := o.srv, o.e, o.p, o.queues, o.seen, o.nodes, o.cfg
	var mu sync.Mutex
	handledIDs := map[string]bool{} // the requests handled
	handled := func(_ context.Context, _ string, r dispatcher.Request, _ takeover.Owner) error {
		mu.Lock()
		defer mu.Unlock()
		handledIDs[r.TaskID] = true
		return nil
	}
	ledger := e.ledger(t)
	for _, q := range queues {
		e.dispatchWorker(t, p, q, ledger, handled)
	}
	type held struct {
		node int // index in nodes
		qs   baton.QueueStatus
	}
	leaders := func(what string) map[string]held {
		out := map[string]held{}
		for _, q := range queues {
			eventually(t, 60*time.Second, what+": "+q+" led", func() error {
				for i, n := range nodes {
					if qs, ok := leading(n, q); ok {
						out[q] = held{i, qs}
						return nil
					}
				}
				return fmt.Errorf("nobody leads %s", q)
			})
		}
		return out
	}
	sent := 0
	dispatched := func(what string) time.Duration {
		start := time.Now()
		var ids []string
		for _, q := range queues {
			sent++
			id, _ := takeover.WorkflowID(p, q)
			req := dispatcher.Request{Type: "agent", TaskID: fmt.Sprintf("t%d", sent), PayloadSHA256: fmt.Sprintf("%064x", sent)}
			// A server just back may time a call out: a producer retries (the dispatch key dedupes).
			eventually(t, 60*time.Second, what+": signal "+req.TaskID, func() error {
				return e.tc.SignalWorkflow(t.Context(), id, "", dispatcher.SignalDispatch, req)
			})
			ids = append(ids, req.TaskID)
		}
		eventually(t, 60*time.Second, what+": requests handled", func() error {
			mu.Lock()
			defer mu.Unlock()
			for _, id := range ids {
				if !handledIDs[id] {
					return fmt.Errorf("%s not handled yet", id)
				}
			}
			return nil
		})
		return time.Since(start)
	}
	before := leaders("before the outage")
	dispatched("before the outage")
	terms := map[string]int{}
	for _, q := range queues {
		terms[q] = seen.termsOf(q)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	// Far past UnfitAfter progress checks, and past the unfit leaders' asks (every Grace).
	outage := 10*ownership.UnfitAfter*cfg.Progress.Interval + 3*time.Second
	time.Sleep(outage)
	for _, q := range queues {
		if n := seen.termsOf(q) - terms[q]; n != 0 {
			t.Errorf("during a Temporal outage of %v, %s changed owner %d times: no worker could run it better", outage, q, n)
		}
		qs, ok := leading(nodes[before[q].node], q)
		if !ok || qs.Token != before[q].qs.Token || qs.HandOverWaiting == "" {
			t.Errorf("during the outage, %s on node %d: leading %v, token %d (was %d), hand-over waiting %q; want kept under the same term, saying why",
				q, before[q].node, ok, qs.Token, before[q].qs.Token, qs.HandOverWaiting)
		}
	}
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	took := dispatched("after the restart")
	t.Logf("server back: requests sent at once were all handled %v later", took)
	after := leaders("after the restart")
	for _, q := range queues {
		if b, a := before[q], after[q]; a.node != b.node || a.qs.Token != b.qs.Token {
			t.Errorf("%s: led by node %d under term %d before the outage, by node %d under term %d after: want the same leader and term",
				q, b.node, b.qs.Token, a.node, a.qs.Token)
		}
		if n := seen.termsOf(q) - terms[q]; n != 0 {
			t.Errorf("%s: %d new terms across the outage, want none", q, n)
		}
	}
}

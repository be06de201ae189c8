package node_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/takeover"
)

// takeovers counts the TakenOver events of every node by queue and term token (a term's first is its
// takeover, every further one a replacement of a run that the term's owner believed closed), and the
// queues' terms.
type takeovers struct {
	mu    sync.Mutex
	n     map[string]map[int64]int
	terms map[string]int
}

func (k *takeovers) sink(ev event.Event) {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch ev.Kind {
	case event.TermStarted:
		k.terms[ev.Queue]++
	case event.TakenOver:
		if k.n[ev.Queue] == nil {
			k.n[ev.Queue] = map[int64]int{}
		}
		k.n[ev.Queue][ev.Token]++
	}
}

func (k *takeovers) of(queue string, token int64) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.n[queue][token]
}

// termsOf is how many terms of queue began so far.
func (k *takeovers) termsOf(queue string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.terms[queue]
}

// replaced is how many times any term of queue took over again within itself.
func (k *takeovers) replaced(queue string) int {
	k.mu.Lock()
	defer k.mu.Unlock()
	n := 0
	for _, c := range k.n[queue] {
		n += c - 1
	}
	return n
}

// restarts is how many Temporal restarts TestTemporalRestartReplacesNoRun does: 4, or
// BATON_TEST_TEMPORAL_RESTARTS for a longer hunt.
func restarts(t *testing.T) int {
	if s := os.Getenv("BATON_TEST_TEMPORAL_RESTARTS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			t.Fatalf("BATON_TEST_TEMPORAL_RESTARTS=%q: want a positive number", s)
		}
		return n
	}
	return 4
}

// A Temporal restart is not a leadership change: while the server is down and while it comes back
// (shards not yet owned, caches cold), every answer it gives about a run that is in fact open --
// NotFound included -- must leave the run alone. Two nodes lead three queues, whose runs a dispatcher
// worker serves and a few requests keep busy; Temporal is stopped and
// started again on the same database several times; after each restart every queue whose term held
// has the same open chain (Temporal's current run, running, the term's token in its memo, started by
// the term's takeover), and no term
// took over more than once (TakenOver events by token, and the run_closes metric by status).
func TestTemporalRestartReplacesNoRun(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a Temporal server of its own")
	}
	reader := metric.NewManualReader()
	meters := metric.NewMeterProvider(metric.WithReader(reader))
	o := startOwnTemporal(t, func(cfg *baton.Config) { cfg.MeterProvider = meters })
	srv, e, p, queues, seen, nodes := o.srv, o.e, o.p, o.queues, o.seen, o.nodes
	// The runs are served, as in production: each restart finds them with workflow tasks in flight.
	ledger := e.ledger(t)
	handled := func(context.Context, string, dispatcher.Request, takeover.Owner) error { return nil }
	for _, q := range queues {
		e.dispatchWorker(t, p, q, ledger, handled)
	}
	sent := 0
	send := func() {
		for _, q := range queues {
			sent++
			e.send(t, p, q, sent)
		}
	}
	owned := func(what string) map[string]baton.QueueStatus {
		out := map[string]baton.QueueStatus{}
		for _, q := range queues {
			var leader *baton.Node
			eventually(t, 60*time.Second, what+": "+q+" led", func() error {
				for _, n := range nodes {
					if _, ok := leading(n, q); ok {
						leader = n
						return nil
					}
				}
				return fmt.Errorf("nobody leads %s", q)
			})
			out[q] = e.ownedRun(t, leader, q, what+": "+q+"'s run is the leader's", nil)
		}
		return out
	}
	before := owned("before the first restart")
	send()
	terms := map[string]int{}
	for _, q := range queues {
		terms[q] = seen.termsOf(q)
	}
	for i := 1; i <= restarts(t); i++ {
		if err := srv.Stop(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := srv.Restart(t.Context()); err != nil {
			t.Fatalf("restart %d: %v", i, err)
		}
		// Long enough for every watch to have been cut by the stop, to have retried into the
		// server's start, and to have polled the restarted server (WatchInterval is 5 s at most).
		time.Sleep(12 * time.Second)
		after := owned(fmt.Sprintf("after restart %d", i))
		for _, q := range queues {
			b, a := before[q], after[q]
			t.Logf("restart %d: %s led by token %d run %s (chain %s), then by token %d run %s (chain %s)",
				i, q, b.Token, b.RunID, b.FirstRunID, a.Token, a.RunID, a.FirstRunID)
			// A run that continued as new is the same chain (FirstRunID); a replacement starts another.
			if a.Token == b.Token && a.FirstRunID != b.FirstRunID {
				t.Errorf("restart %d: %s's run %s was replaced by %s within term %d: a Temporal restart is no reason to replace a run",
					i, q, b.FirstRunID, a.FirstRunID, a.Token)
			}
			if n := seen.of(q, a.Token); n != 1 {
				t.Errorf("restart %d: %s's term %d took over %d times, want once", i, q, a.Token, n)
			}
		}
		for _, q := range queues {
			// Not held here: a Temporal outage may move queues (balance hands over a queue whose run
			// is unreachable), which is a leadership change; measured for the report.
			t.Logf("restart %d: %s: %d new terms, %d replacements within a term so far", i, q, seen.termsOf(q)-terms[q], seen.replaced(q))
			terms[q] = seen.termsOf(q)
		}
		send()
		before = after
	}
	closes := counterBy(t, reader, takeover.MetricRunCloses, "status")
	t.Logf("run closes seen by supervision, by status: %v; takeovers by path: %v", closes, counterBy(t, reader, takeover.MetricTakeovers, "path"))
	// No run vanished from Temporal here: a NotFound that supervision took for a close is the
	// restart's answer mistaken for the run's end.
	if n := closes["not_found"]; n != 0 {
		t.Errorf("supervision took %d NotFound answers of a restarting server for closed runs", n)
	}
}

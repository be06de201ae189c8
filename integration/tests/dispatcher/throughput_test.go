package dispatcher_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/harness"
)

// drain sends n requests to the queue's run while no worker runs, starts a worker, and returns how
// long the run took to have every one handled (ledger done), and the handler.
func drain(t *testing.T, e *env, n int, opts dispatcher.RegisterOptions, tag string) (time.Duration, *handled, []string) {
	keys := make([]string, n)
	var wg sync.WaitGroup
	const senders = 8
	for s := range senders {
		wg.Go(func() {
			for i := s; i < n; i += senders {
				r := request(fmt.Sprintf("%s-%d", tag, i))
				keys[i] = r.Key()
				e.signal(t, r)
			}
		})
	}
	wg.Wait()
	h := &handled{}
	begin := time.Now()
	e.workerWith(t, h, opts)
	harness.Eventually(t, 5*time.Minute, fmt.Sprintf("%d requests handled", n), func() error {
		if done := countDone(e.records(t)); done < n {
			return fmt.Errorf("%d of %d done", done, n)
		}
		return nil
	})
	return time.Since(begin), h, keys
}

func countDone(recs map[string]string) int {
	n := 0
	for _, v := range recs {
		if strings.HasPrefix(v, "done ") {
			n++
		}
	}
	return n
}

// One queue's run hands out a backlog concurrently, each request once, with the etcd ledger in
// place. The rate is logged, not asserted (the machine may be loaded): issue 13's target is at
// least 200 requests per second per queue.
func TestDispatchThroughput(t *testing.T) {
	e := newEnv(t)
	e.take(t, "node-a")
	const n = 600
	took, h, keys := drain(t, e, n, dispatcher.RegisterOptions{}, "rate")
	onceEach(t, h, keys)
	calls := h.snapshot()
	first, last := calls[0].at, calls[0].at
	for _, c := range calls {
		first, last = minTime(first, c.at), maxTime(last, c.at)
	}
	t.Logf("first to last handler call: %v (%.0f requests/s)", last.Sub(first).Round(time.Millisecond), float64(n-1)/last.Sub(first).Seconds())
	t.Logf("handled %d requests in %v: %.0f requests/s (MaxConcurrent %d, etcd ledger)", n, took.Round(time.Millisecond),
		float64(n)/took.Seconds(), dispatcher.DefaultMaxConcurrent)
}

// Producers waiting for each request to be handled: the rate of Dispatch calls that returned.
// Fewer producers than Temporal's default limit of in-flight updates per run (10), so the figure is
// the dispatcher's and not the server's ResourceExhausted backoff.
func TestProducerThroughput(t *testing.T) {
	e := newEnv(t)
	e.worker(t)
	e.take(t, "node-a")
	p := e.producer(t)
	const n, producers = 200, 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	begin := time.Now()
	for s := range producers {
		wg.Go(func() {
			for i := s; i < n; i += producers {
				// Bounded, so a request that is never handled fails the test instead of hanging it.
				ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
				if _, err := p.Dispatch(ctx, project, e.queue, request(fmt.Sprintf("prod-%d", i))); err != nil {
					errs <- err
				}
				cancel()
			}
		})
	}
	wg.Wait()
	took := time.Since(begin)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if done := countDone(e.records(t)); done != n {
		t.Fatalf("%d of %d recorded done", done, n)
	}
	t.Logf("%d producers: %d Dispatch calls returned handled in %v: %.0f requests/s", producers, n, took.Round(time.Millisecond),
		float64(n)/took.Seconds())
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

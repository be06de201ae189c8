package e2e_test

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"

	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// Temporal restarts under load: three workers over q1 and q2 on a Temporal server of the test's own,
// a Producer calling Dispatch 10 times a second on each queue, and the server stopped for 3 s and
// started again on the same port and database. Every call, those sent while it was down included,
// returns handled once; how long after the server was back they returned is logged (the bench holds
// the target).
func TestTemporalRestartLosesNoCall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real worker and server processes")
	}
	srv := temporalx.Start(t, temporalx.Options{})
	c := newClusterOn(t, srv, "q1", "q2")
	for i := 1; i <= 3; i++ {
		c.start(fmt.Sprintf("t%d-0", i))
	}
	c.waitReady(60 * time.Second)
	out := filepath.Join(t.TempDir(), "accepted")
	load := workerproc.StartT(t, workerproc.Options{Load: true}, c.bin, "load-restart", c.env, "-mode=dispatch", "-rate=10",
		"-duration=30s", "-interval=1s", "-settle=30s", "-accepted-out="+out)
	waitSummary(t, load, 30*time.Second)
	time.Sleep(3 * time.Second)

	down := time.Now()
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if err := srv.Restart(t.Context()); err != nil {
		t.Fatalf("restart: %v", err)
	}
	back := time.Now()
	t.Logf("Temporal down for %v", back.Sub(down).Round(time.Millisecond))

	select {
	case <-load.Done():
	case <-time.After(3 * time.Minute):
		t.Fatal("load did not finish")
	}
	final := waitSummary(t, load, 0)
	t.Logf("%+v ledger %+v", final, final.Ledger)
	if load.Code() != 0 || !final.Final || final.Ledger == nil {
		t.Fatalf("load exited %d without a final summary read from the ledger:\n%s", load.Code(), load.Tail(3000))
	}
	if final.Unsettled != 0 || final.Errors != 0 {
		t.Errorf("%d Dispatch calls unreturned within 30 s and %d failed, of %d sent", final.Unsettled, final.Errors, final.Sent)
	}
	if l := final.Ledger; l.HandledTwice != 0 || l.NotHandled != 0 {
		t.Errorf("ledger: %d handled twice, %d accepted but not handled: %+v", l.HandledTwice, l.NotHandled, l)
	}
	for _, q := range c.queues {
		if _, qs := c.leader(q); qs.RunID != "" {
			t.Logf("queue %s: workflow task timeouts since the stop: %v", q, c.taskTimeouts(q, qs.RunID, down))
		}
	}
	first, p99, last := returnedAfter(t, out, down, back)
	t.Logf("calls sent before the server was back returned after it: first %v, p99 %v, last %v", first, p99, last)
}

// returnedAfter reads `demo-worker load -accepted-out` and returns, for the calls sent before back and
// returned after down, how long after back the first, the 99th percentile and the last returned.
func returnedAfter(t *testing.T, path string, down, back time.Time) (first, p99, last time.Duration) {
	t.Helper()
	calls, err := loadreport.ReadAccepted(path)
	if err != nil {
		t.Fatal(err)
	}
	var after []time.Duration
	for _, c := range calls {
		if c.Sent.Before(back) && c.AcceptedTime.After(down) {
			after = append(after, c.AcceptedTime.Sub(back))
		}
	}
	if len(after) == 0 {
		t.Fatal("no call was in flight across the restart")
	}
	slices.Sort(after)
	return after[0], after[len(after)*99/100], after[len(after)-1]
}

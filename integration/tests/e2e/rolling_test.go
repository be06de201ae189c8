package e2e_test

import (
	"fmt"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/workerproc"
)

// A rolling restart done as the README says, on a busy machine: three workers over q1 and q2, a
// Producer (`demo-worker load -mode dispatch`, up to 256 calls in flight per queue) calling Dispatch
// 40 times a second on each queue, two busy loops beside them, and each worker in turn replaced: its
// successor process started and ready, then the old one sent SIGTERM (its Temporal workers quiesce the
// runs it leads, stop, and the Node hands the queues over). Every Dispatch call must return within the
// load's settle bound (30 s), handled once; none may be handled twice or lost.
//
// Before dispatcher.ProducerConfig.MaxInFlight, the calls the server refused (at most 10 updates in
// flight on a run) came back as retries by the hundred a second, each taking the run's lock on the
// server: the quiesce timed out, the successor's describe and the reconciler's terminate timed out
// for 30 s, and 980 of 1,149 calls were still unanswered after 30 s.
func TestRollingRestartUnderLoadAnswersEveryCall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real worker processes")
	}
	busyLoops(t, 2)
	c := threeWorkers(t, "r")
	load := workerproc.StartT(t, workerproc.Options{Load: true}, c.bin, "load-rolling", c.env, "-mode=dispatch", "-rate=40", "-duration=40s", "-interval=2s", "-settle=30s")
	waitSummary(t, load, 30*time.Second) // requests are flowing

	for i := 1; i <= 3; i++ {
		old := c.procs[fmt.Sprintf("r%d-0", i)]
		c.start(fmt.Sprintf("r%d-1", i))
		c.waitReady(60 * time.Second)
		stopped := time.Now()
		old.signal(syscall.SIGTERM)
		select {
		case <-old.Done():
		case <-time.After(60 * time.Second):
			t.Fatalf("%s still running 60 s after SIGTERM", old.id)
		}
		t.Logf("%s stopped in %v", old.id, time.Since(stopped).Round(time.Millisecond))
		time.Sleep(2 * time.Second) // a rolling update waits for the new pod before the next
	}

	select {
	case <-load.Done():
	case <-time.After(3 * time.Minute):
		t.Fatal("load did not finish")
	}
	final := waitSummary(t, load, 0)
	t.Logf("%+v ledger %+v unsettled %+v", final, final.Ledger, final.UnsettledLedger)
	if load.Code() != 0 || !final.Final || final.Ledger == nil {
		t.Fatalf("load exited %d without a final summary read from the ledger:\n%s", load.Code(), load.Tail(3000))
	}
	if final.Unsettled != 0 || final.Errors != 0 {
		for id, p := range c.procs {
			t.Logf("%s:\n%s", id, p.Tail(4000))
		}
		t.Errorf("%d Dispatch calls unreturned within 30 s and %d failed, of %d sent", final.Unsettled, final.Errors, final.Sent)
	}
	if l := final.Ledger; l.HandledTwice != 0 || l.NotHandled != 0 {
		t.Errorf("ledger: %d handled twice, %d accepted but not handled: %+v", l.HandledTwice, l.NotHandled, l)
	}
	c.checkOneDispatcherPerQueue()
}

// busyLoops runs n processes that spin on a core each until the test ends: the busy machine a
// deploy must not depend on being quiet.
func busyLoops(t *testing.T, n int) {
	t.Helper()
	for range n {
		cmd := exec.CommandContext(t.Context(), "sh", "-c", "while :; do :; done")
		if err := cmd.Start(); err != nil {
			t.Fatalf("busy loop: %v", err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	}
}

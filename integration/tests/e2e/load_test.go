package e2e_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// `demo-worker load` through a crash of the leader of q1: requests flow to both queues, the leader is
// SIGKILLed, a successor takes over, and the load's own read-back of the etcd ledger says what
// happened to every request Temporal accepted. Nothing is ever handled twice. A request the killed
// owner's run accepted but did not handle is lost until the dispatcher carries the terminated run's
// backlog over to the next run; the test logs that figure rather than asserting it.
func TestLoadThroughALeaderKill(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real worker processes")
	}
	c := threeWorkers(t, "l")

	for _, mode := range []string{"signal", "dispatch"} {
		t.Run(mode, func(t *testing.T) {
			defer c.useT(t)()
			loadThroughAKill(t, c, mode)
		})
	}
	statusShowsLoad(t, c)
}

// statusShowsLoad waits until `demo-worker status -json` shows the dispatches the live workers
// handled, which they report to the registry through baton.Config.Load.
func statusShowsLoad(t *testing.T, c *cluster) {
	t.Helper()
	var out []byte
	for deadline := time.Now().Add(30 * time.Second); ; {
		cmd := exec.CommandContext(t.Context(), c.bin, "status", "-json")
		cmd.Env = append(os.Environ(), c.env...)
		var err error
		out, err = cmd.Output()
		var rep struct {
			Queues []struct {
				Queue   string `json:"queue"`
				Workers struct {
					Online    int   `json:"online"`
					Active    int   `json:"active"`
					Completed int64 `json:"completed"`
				} `json:"workers"`
			} `json:"queues"`
		}
		if err == nil && json.Unmarshal(out, &rep) == nil {
			var done int64
			for _, q := range rep.Queues {
				done += q.Workers.Completed
			}
			if done > 0 {
				t.Logf("demo-worker status: %d dispatches completed by the live workers", done)
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("demo-worker status never showed a completed dispatch (err %v):\n%s", err, out)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// loadThroughAKill runs the load in mode while the leader of q1 is SIGKILLed, then checks the load's
// ledger report.
func loadThroughAKill(t *testing.T, c *cluster, mode string) {
	load := workerproc.StartT(t, workerproc.Options{Load: true}, c.bin, "load-"+mode, c.env, "-mode="+mode, "-rate=20", "-duration=8s", "-interval=1s", "-settle=30s")
	waitSummary(t, load, 30*time.Second) // the first summary: requests are flowing

	old, _ := c.waitLeader("q1", takeoverSLA, nil)
	killed := time.Now()
	old.signal(syscall.SIGKILL)
	next, qs := c.waitLeader("q1", takeoverSLA, old)
	t.Logf("SIGKILL of %s: %s leads q1 (token %d) %v later", old.id, next.id, qs.Token, time.Since(killed).Round(time.Millisecond))

	select {
	case <-load.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("load did not finish")
	}
	if load.Code() != 0 {
		t.Fatalf("load exited %d", load.Code())
	}
	final := waitSummary(t, load, 0)
	t.Logf("%+v", final)
	l := final.Ledger
	if !final.Final || final.Sent == 0 || final.Accepted == 0 || l == nil || int64(l.Accepted) != final.Accepted {
		t.Fatalf("load sent nothing or the ledger report does not cover every accepted request: %+v (ledger %+v)", final, l)
	}
	if l.HandledTwice != 0 {
		t.Errorf("%d requests handled twice: %+v", l.HandledTwice, l)
	}
	if l.Handled+l.NotHandled != l.Accepted {
		t.Errorf("handled %d + not handled %d != accepted %d", l.Handled, l.NotHandled, l.Accepted)
	}
	t.Logf("%s: accepted but never handled across the kill: %d of %d (%.1f %%)", mode, l.NotHandled, l.Accepted,
		100*float64(l.NotHandled)/float64(l.Accepted))
	if mode == "dispatch" && l.NotHandled > 0 {
		t.Errorf("Dispatch returned for %d requests the ledger never shows handled", l.NotHandled)
	}
	c.gen++
	c.start(fmt.Sprintf("l%d-%d", c.gen, c.gen))
	c.waitReady(60 * time.Second)
}

// waitSummary returns the last summary p printed, waiting up to d for one (the final one once p has
// exited).
func waitSummary(t *testing.T, p *workerproc.Proc, d time.Duration) loadreport.Summary {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		if s, ok := p.Summary(); ok {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("no load summary within %v:\n%s", d, p.Tail(3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

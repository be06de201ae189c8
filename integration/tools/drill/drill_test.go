package drill_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/tools/drill"
)

// budget is the hard bound of the short drill, start-up and checks included.
const budget = 6 * time.Minute

// TestDrillShort is the short drill of `make test`: 3 workers over 6 queues, every fault kind once
// (SIGKILL, SIGTERM, SIGSTOP past the TTL, a rolling restart, an etcd member kill on the 3-member
// etcd, ...), while a fire-and-forget producer sends 2 dispatch requests per second to each of two
// queues with SignalWorkflow: every request Temporal accepted must be recorded handled in the etcd
// ledger, none completed twice, no record left pending (issue #13's chaos proof, in short).
// With BATON_ETCD_ENDPOINTS, BATON_TEMPORAL_ADDRESS or BATON_REDIS_ADDR set, the faults that need to
// control that server (etcd member kill, Temporal restart, Redis restart) are skipped; the drill then
// uses a project name of its own so that it does not meet another run's dispatchers.
func TestDrillShort(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real servers and worker processes for about two minutes")
	}
	project := "drill"
	for _, k := range []string{"BATON_ETCD_ENDPOINTS", "BATON_TEMPORAL_ADDRESS", "BATON_REDIS_ADDR"} {
		if os.Getenv(k) != "" {
			project = fmt.Sprintf("drill%d", time.Now().UnixNano()%1e9)
		}
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(t.Context(), budget)
	defer cancel()
	logs := t.TempDir()
	rep, err := drill.Run(ctx, drill.Config{
		Workers: 3, Queues: 6, Project: project, Cycles: 1,
		// Every kind once takes about 100 s here, three times that on a machine loaded to twice its
		// cores (each fault waits for the fleet to settle); Duration only guards against a stuck one.
		Duration: 4 * time.Minute,
		// 2 per second per queue, not the 10: the Temporal server here is this race-built
		// test binary, several times slower, sharing two cores with the other integration packages;
		// the verdict is as strict at any rate. `make drill` runs the rate.
		LoadRate: 2, LoadQueues: 2, LoadSettle: time.Minute,
		LogDir: logs,
		Out:    testWriter{t},
	})
	if rep != nil {
		var buf bytes.Buffer
		rep.WriteTable(&buf)
		t.Log(buf.String())
	}
	if err != nil {
		dumpLogs(t, logs)
		t.Fatalf("the drill did not complete within its %v budget: %v", budget, err)
	}
	for _, s := range rep.Skipped {
		t.Logf("skipped: %s", s)
	}
	if !rep.OK() {
		dumpLogs(t, logs)
		t.Fatalf("%d violations of Baton's invariants (see the table above)", len(rep.Violations))
	}
	// The term checks read the workers' event streams: without terms they would pass vacuously.
	if rep.Checks.Terms < 6 {
		t.Errorf("only %d terms seen in the workers' events for 6 queues and their faults: the event stream is not read", rep.Checks.Terms)
	}
	if l := rep.Load; l == nil || l.Accepted == 0 || l.Handled != l.Accepted {
		t.Errorf("the load phase did not account for every accepted request: %+v", l)
	} else {
		t.Logf("load: accepted %d, handled %d, lost %d, double %d, pending %d, handler re-runs %d; send -> handled p99 %v",
			l.Accepted, l.Handled, l.Lost, l.Double, l.Pending, l.Redispatched, l.P99)
	}
	if want := len(drill.AllKinds) - len(rep.Skipped); len(rep.Faults) < want {
		t.Errorf("%d faults injected, want every kind that can run here (%d)", len(rep.Faults), want)
	}
	t.Logf("short drill done in %v", time.Since(began).Round(time.Second))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func dumpLogs(t *testing.T, dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		s := string(b)
		if len(s) > 4000 {
			s = "…" + s[len(s)-4000:]
		}
		t.Logf("--- %s (tail)\n%s", filepath.Base(f), s)
	}
}

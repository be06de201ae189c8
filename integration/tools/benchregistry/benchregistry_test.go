package benchregistry_test

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/tools/benchregistry"
)

func TestMain(m *testing.M) { harness.VerifyTestMain(m) }

// TestCommandsPerHeartbeatAreConstant runs the benchmark with 1,000 and 10,000 workers: each heartbeat
// is one client command, and the same number of server commands, whatever the fleet size.
func TestCommandsPerHeartbeatAreConstant(t *testing.T) {
	srv := redisx.Start(t, redisx.Options{})
	rdb := redisx.Client(t, srv)
	sizes := []int{1_000, 10_000}
	if testing.Short() {
		sizes = []int{200, 2_000}
	}
	var results []benchregistry.Result
	for _, n := range sizes {
		res, err := benchregistry.Run(t.Context(), rdb, n, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%d workers: %.0f heartbeats/s, p50 %v p95 %v p99 %v, %.2f client / %.2f server commands per heartbeat (register %v)",
			res.Workers, res.PerSecond, res.P50, res.P95, res.P99, res.ClientCommandsPerHeartbeat, res.ServerCommandsPerHeartbeat, res.RegisterElapsed)
		if res.Heartbeats != n || res.P50 <= 0 || res.P99 < res.P50 || res.PerSecond <= 0 {
			t.Fatalf("implausible result: %+v", res)
		}
		if res.ClientCommandsPerHeartbeat != 1 {
			t.Fatalf("%d workers: %v client commands per heartbeat, want 1", n, res.ClientCommandsPerHeartbeat)
		}
		results = append(results, res)
	}
	if srv.External() {
		return // other clients may be counted in the server's figures
	}
	if a, b := results[0].ServerCommandsPerHeartbeat, results[1].ServerCommandsPerHeartbeat; a != b || a < 2 || a > 20 {
		t.Fatalf("server commands per heartbeat: %v with %d workers, %v with %d: want the same small number", a, sizes[0], b, sizes[1])
	}
	if n, err := rdb.DBSize(t.Context()).Result(); err != nil || n != 0 {
		t.Fatalf("the benchmark left %d keys (%v)", n, err)
	}
}

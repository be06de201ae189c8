package main

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/integration/tools/benchregistry"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// benchRegistry measures registry heartbeats of o.workers registered workers on a real redis-server,
// beside the same measurement with a tenth of the workers in the same run: the latency should barely
// move and the Redis commands per heartbeat must not move at all.
func benchRegistry(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	small, err := benchregistry.Run(ctx, s.rdb, o.workers/10, 3)
	if err != nil {
		return nil, err
	}
	large, err := benchregistry.Run(ctx, s.rdb, o.workers, 3)
	if err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: registry: %d workers: %.0f heartbeats/s (%d workers: %.0f/s); registering all took %v\n",
		large.Workers, large.PerSecond, small.Workers, small.PerSecond, large.RegisterElapsed.Round(time.Millisecond))
	ms, base := benchreport.Ms, fmt.Sprintf("%d workers", small.Workers)
	lat := benchreport.Figure{Name: fmt.Sprintf("registry heartbeat, %d workers", large.Workers), Unit: "ms",
		Samples: large.Heartbeats, P50: ms(large.P50), P95: ms(large.P95), P99: ms(large.P99),
		Baseline: base, BaselineP50: ms(small.P50), BaselineP95: ms(small.P95), Target: "p95 <= 10 ms", Met: ms(large.P95) <= 10}
	cmds := benchreport.Single(fmt.Sprintf("registry Redis commands per heartbeat, %d workers", large.Workers), "commands",
		large.ServerCommandsPerHeartbeat, base, small.ServerCommandsPerHeartbeat,
		fmt.Sprintf("constant (%.0f round trip per heartbeat)", large.ClientCommandsPerHeartbeat),
		large.ServerCommandsPerHeartbeat == small.ServerCommandsPerHeartbeat && large.ClientCommandsPerHeartbeat == 1)
	cmds.Samples = large.Heartbeats
	return []benchreport.Figure{lat, cmds}, nil
}

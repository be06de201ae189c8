package sim_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/integration/sim"
)

// TestSimHeartbeat runs heartbeat micro-schedules: 2-3 owners' real heartbeat.Writers, one after
// another with increasing fencing tokens from a small etcd term model (Confirm answers as etcd
// would, and a restore without --bump-revision makes the next owner's token lower than the stored
// entry's), write the entry of one queue into the Redis model (miniredis over in-memory pipes, so
// the real Lua scripts run) under seeded faults: stale owners that learn of their end late, FLUSHALL,
// a restart without data, unavailability, reply delays past the write timeout, etcd unreachable
// for Confirm. Invariants at every command the store executes and at every step: the entry's token
// never goes down except through the regression path (etcd confirmed the lower token's term, of a
// later history), so a superseded owner's write never lands over a newer owner's entry; the entry
// decodes as the reconciler reads it; after the heal the current owner's entry is written within
// hbLiveBound and stays (no flapping).
func TestSimHeartbeat(t *testing.T) {
	b, err := sim.BatchFromEnv("heartbeat", heartbeatProbes)
	if err != nil {
		t.Fatal(err)
	}
	// go-redis logs every failed dial through its one package-level logger; the faults make many.
	redis.SetLogger(quietRedis{})
	b.Run(t, runHeartbeat)
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

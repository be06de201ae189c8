package sim_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/integration/sim"
)

// TestSimReconciler runs the reconciler world (sim.ReconcilerWorld: 3-5 processes wired as a Node
// wires them, each with real queue and reconciler Electors over the etcd model, a real takeover
// Manager and heartbeat Writer for the queues it wins, and the real Reconciler running its term
// against the Redis and Temporal models; 45 s of seeded faults, then a heal after which the
// reconciler's promise is checked) for SIM_BUDGET, or replays SIM_SEED.
func TestSimReconciler(t *testing.T) {
	b, err := sim.BatchFromEnv("reconciler", sim.ReconcilerProbes)
	if err != nil {
		t.Fatal(err)
	}
	// go-redis logs every failed dial through its one package-level logger; Redis goes down here.
	redis.SetLogger(quietRedis{})
	b.Run(t, sim.RunReconciler)
}

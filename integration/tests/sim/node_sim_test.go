package sim_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/integration/sim"
)

// TestSimNode runs the node world (sim.NodeWorld: 3-5 whole baton.Nodes, each built by baton.New on
// its process's seeded clock over the etcd, Redis and Temporal models, serving 2-8 queues; 45 s of
// seeded faults, graceful stops, rolling deploys and drains among them, then a heal after which every
// queue's leader must have its own run open, nothing of a queue nobody stands for may be left, and the
// registry must list exactly the live processes) for SIM_BUDGET, or replays SIM_SEED.
func TestSimNode(t *testing.T) {
	b, err := sim.BatchFromEnv("node", sim.NodeProbes)
	if err != nil {
		t.Fatal(err)
	}
	// go-redis logs every failed dial through its one package-level logger; Redis goes down here.
	redis.SetLogger(quietRedis{})
	b.Run(t, sim.RunNode)
}

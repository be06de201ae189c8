package sim_test

import (
	"testing"

	"github.com/baton-run/baton/integration/sim"
)

// balanceProbes are the rare events a balance batch must reach.
var balanceProbes = []string{sim.ProbeDrainHandedOver, sim.ProbeDrainKept, sim.ProbeShedMove, sim.ProbeRolloutMove,
	sim.ProbeRestore, sim.ProbeRestoreBump, sim.ProbeDuplicate}

// TestSimBalance runs the balance world (3-5 processes, each a real Elector and balance.Runner over
// the etcd model serving a seeded subset of 2-8 queues, a minute of drains, crashes, restarts,
// network faults and in some seeds a rolling deploy from v1 to v2, then a heal with a planned drain,
// a settle and a stable window) for SIM_BUDGET, or replays SIM_SEED.
func TestSimBalance(t *testing.T) {
	b, err := sim.BatchFromEnv("balance", balanceProbes)
	if err != nil {
		t.Fatal(err)
	}
	b.Run(t, sim.RunBalance)
}

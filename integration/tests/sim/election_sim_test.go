package sim_test

import (
	"testing"

	"github.com/baton-run/baton/integration/sim"
)

// electionProbes are the rare events an election batch must reach.
var electionProbes = []string{
	"fenced write committed",
	"fenced write refused",
	"term lost to the local lease deadline",
	"operator revoked a leader's lease",
	"no-leader window while a leader acted",
	sim.ProbeCompactedWatch,
	sim.ProbeRestore,
	sim.ProbeRestoreBump,
	sim.ProbeDuplicate,
}

// TestSimElection runs the election world (3-5 processes with real Electors over the etcd model,
// 1-8 queues, 60 s of seeded faults then a heal phase) for SIM_BUDGET, or replays SIM_SEED.
func TestSimElection(t *testing.T) {
	b, err := sim.BatchFromEnv("election", electionProbes)
	if err != nil {
		t.Fatal(err)
	}
	b.Run(t, sim.RunElection)
}

package sim_test

import (
	"testing"

	"github.com/baton-run/baton/integration/sim"
)

// TestSimCarry runs the carry-over world (the real dispatcher Backlog activity, its scan of the run
// log, describes, continue-as-new links, visibility with lag and each run's history, against the
// Temporal model and a real etcd run log; scripted dispatcher runs with takeovers, late starts,
// operator closes, continue-as-new and runs terminated mid-activity; then a heal whose last run reads
// its whole backlog) for SIM_BUDGET, or replays SIM_SEED. Every accepted request must be handled.
func TestSimCarry(t *testing.T) {
	b, err := sim.BatchFromEnv("carry", sim.CarryProbes)
	if err != nil {
		t.Fatal(err)
	}
	b.ExactReplay = true
	b.Run(t, sim.RunCarry)
}

package sim_test

import (
	"testing"

	"github.com/baton-run/baton/integration/sim"
)

// ledgerProbes are the rare events a ledger batch must reach.
var ledgerProbes = []string{
	sim.ProbeLedgerBeginOverOlder,
	sim.ProbeLedgerLostResponse,
	sim.ProbeLedgerRegranted,
	sim.ProbeLedgerSuperseded,
	sim.ProbeLedgerWatchCompletion,
	sim.ProbeDuplicate,
	sim.ProbeRestore,
	sim.ProbeRestoreBump,
}

// TestSimLedger runs the ledger world (the real etcd dispatch ledger of 2-3 owners with increasing
// tokens over the etcd model, each handling a stream of dispatch requests under seeded faults, then
// a heal whose owner must Begin and Complete within a bound) for SIM_BUDGET, or replays SIM_SEED.
func TestSimLedger(t *testing.T) {
	b, err := sim.BatchFromEnv("ledger", ledgerProbes)
	if err != nil {
		t.Fatal(err)
	}
	b.Run(t, sim.RunLedger)
}

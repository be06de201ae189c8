package sim_test

import (
	"testing"
	"testing/synctest"

	"github.com/baton-run/baton/integration/sim"
)

// TestSimTakeover runs micro-schedules: 2-4 processes take one queue over from each other with
// increasing fencing tokens, real takeover.Managers against the Temporal model, with seeded faults on
// every request (delay and so reordering, loss before and after the effect, duplicates), stalled
// processes that believe in an ended term, and out-of-band closes and continue-as-new of the open
// run; in a seed in two the Managers log their runs in a real EtcdRunLog on the etcd model, across a
// faulty network of their own. Invariants at every step: every terminate names its run; no run is closed by a request of a
// lower token than its owner's; a takeover never reports success for an ended term; after the heal
// the open run is the last owner's, and stays so. The world's scheduler acts only when the bubble is
// quiescent, so every seed must replay exactly.
func TestSimTakeover(t *testing.T) {
	b, err := sim.BatchFromEnv("takeover", takeoverProbes)
	if err != nil {
		t.Fatal(err)
	}
	b.ExactReplay = true
	verbose := b.Replay && testing.Verbose() // the Managers' own logs, for a replayed seed only
	b.Run(t, func(t *testing.T, seed uint64, _ bool) sim.Result {
		var res sim.Result
		synctest.Test(t, func(t *testing.T) { res = takeoverSchedule(t, seed, verbose) })
		return res
	})
}

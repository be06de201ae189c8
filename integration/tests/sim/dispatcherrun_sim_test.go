package sim_test

import (
	"testing"

	"github.com/baton-run/baton/integration/sim"
)

// TestSimDispatcherRun runs the dispatcher-run world (the real dispatcher workflow in the SDK's
// test environment, a run per environment chained by continue-as-new, carrying over a prior run's
// backlog with the real Backlog activity whose pages come back late, while a storm of signals and
// Dispatch updates makes Temporal suggest continue-as-new in every run, its senders resending what a
// run rejected or left unanswered, and in some seeds a step-down: quiesce, end of the run, a new
// owner's run carrying over through the Backlog scan) for SIM_BUDGET, or replays SIM_SEED. The
// carried requests must be handled during the storm, and every request after it, once; every update
// answered; a quiesce returns with no dispatch in flight and none starts after it.
func TestSimDispatcherRun(t *testing.T) {
	b, err := sim.BatchFromEnv("dispatcher-run", sim.RunProbes)
	if err != nil {
		t.Fatal(err)
	}
	b.Run(t, sim.RunDispatcherRun)
}

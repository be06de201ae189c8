package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/baton-run/baton/integration/sim"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// simPackage is the package of the simulator's batches (TestSim...).
const simPackage = "github.com/baton-run/baton/integration/tests/sim"

// simFleetMin is the simulated time a fleet schedule must span to count (issue #42): a minute.
const simFleetMin = 60 * time.Second

// simMicroGoal is the micro-schedules an hour the simulator aims at (issue #42).
const simMicroGoal = 1_000_000

// simFleetGoal is the simulated-to-real time ratio the fleets aim at (issue #42).
const simFleetGoal = 1000

// simWorld is one batch of the simulator as the sim section runs it.
type simWorld struct {
	name, test string // the name in the figures; the batch's test in simPackage
	what       string // what a schedule holds, for the figure's name
	fleet      bool   // a fleet of processes, else a micro-schedule (one component against the models)
}

var simWorlds = []simWorld{
	{"election", "TestSimElection", "fleet: 3-5 processes, 1-8 queues", true},
	{"balance", "TestSimBalance", "fleet with balance: 3-5 processes, 2-8 queues", true},
	{"reconciler", "TestSimReconciler", "fleet with the reconciler, takeovers and heartbeats: 3-5 processes, 2-8 queues", true},
	{"node", "TestSimNode", "fleet of whole baton.Nodes: 3-5 processes, 2-8 queues", true},
	{"takeover", "TestSimTakeover", "micro: takeover vs Temporal model", false},
	{"ledger", "TestSimLedger", "micro: ledger vs etcd model", false},
	{"heartbeat", "TestSimHeartbeat", "micro: heartbeat vs Redis model", false},
	{"carry-over", "TestSimCarry", "micro: carry-over scan vs Temporal and etcd models", false},
	{"dispatcher-run", "TestSimDispatcherRun", "micro: dispatcher workflow in the SDK test environment", false},
}

// benchSim runs each batch of the deterministic simulator for o.simBudget as a subprocess (a batch
// runs only inside synctest.Test with a *testing.T: the test binary is built once, then run with
// -test.run, SIM_BUDGET and SIM_REPORT) and reads its speed back from the report. Each world's
// figures stand beside the same schedules at real time, which is how fast the real-server tests
// could run them: schedules/s beside one per schedule's simulated length, the simulated-to-real
// ratio beside 1x, and, for the micro-schedules, the hour extrapolated from the budget beside the
// same hour at real time.
func benchSim(ctx context.Context, _ *servers, o options) ([]benchreport.Figure, error) {
	dir, err := os.MkdirTemp("", "batonbench-sim-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "sim.test")
	if out, err := exec.CommandContext(ctx, "go", "test", "-c", "-o", bin, simPackage).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("go test -c %s: %w\n%s", simPackage, err, out)
	}
	var figures []benchreport.Figure
	for _, w := range simWorlds {
		r, err := runSimBatch(ctx, bin, dir, w, o.simBudget)
		if err != nil {
			return nil, fmt.Errorf("%s batch: %w", w.name, err)
		}
		fmt.Printf("batonbench: sim %s: %d schedules in %.1f s, %.1f simulated s each (shortest %.1f s), %.0fx real time\n",
			w.name, r.Schedules, r.RealSeconds, r.SimulatedSeconds/float64(r.Schedules), r.ShortestSimulatedSeconds,
			r.SimulatedSeconds/r.RealSeconds)
		figures = append(figures, simFigures(w, r, o.simBudget)...)
	}
	return figures, nil
}

// runSimBatch runs one batch for budget in its own process and reads its report. A batch that
// fails (a violation, a probe never hit) fails the section: its speed would be a broken simulator's.
func runSimBatch(ctx context.Context, bin, dir string, w simWorld, budget time.Duration) (sim.Report, error) {
	report := filepath.Join(dir, w.name+".report")
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^"+w.test+"$", "-test.count=1",
		"-test.timeout", (budget + 10*time.Minute).String())
	cmd.Dir = dir
	// Only the budget and the report: a SIM_SEED or SIM_SEEDS of the caller's would change the batch.
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.Contains([]string{sim.EnvSeed, sim.EnvTrace, sim.EnvTraceDir, sim.EnvBudget, sim.EnvSeeds,
			sim.EnvFirst, sim.EnvStop, sim.EnvReport}, k)
	})
	cmd.Env = append(env, sim.EnvBudget+"="+budget.String(), sim.EnvReport+"="+report)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		return sim.Report{}, fmt.Errorf("%s: %w; last lines:\n%s", w.test, err, strings.Join(lines[max(0, len(lines)-20):], "\n"))
	}
	r, err := sim.ReadReport(report)
	if err == nil && (r.Schedules == 0 || r.RealSeconds <= 0) {
		err = fmt.Errorf("%s: the report counts %d schedules in %.1f s", w.test, r.Schedules, r.RealSeconds)
	}
	return r, err
}

// simFigures are one world's rows. The baselines are the same schedules at real time: what a
// real-server test, whose clock is the wall's, would need to play them.
func simFigures(w simWorld, r sim.Report, budget time.Duration) []benchreport.Figure {
	n := float64(r.Schedules)
	perSec, ratio := n/r.RealSeconds, r.SimulatedSeconds/r.RealSeconds
	each := r.SimulatedSeconds / n // simulated seconds per schedule
	name := fmt.Sprintf("sim %s (%s)", w.name, w.what)
	atRealTime := fmt.Sprintf("the same schedules at real time (%.0f s each)", each)
	rate := benchreport.Single(name+": schedules/s", "schedules/s", perSec, atRealTime, 1/each, "informational", true)
	speed := benchreport.Single(name+": simulated-to-real time", "x real time", ratio, "real time", 1, "informational", true)
	if w.fleet {
		rate.Target = fmt.Sprintf("every schedule >= %v simulated (shortest %.0f s)", simFleetMin, r.ShortestSimulatedSeconds)
		rate.Met = r.ShortestSimulatedSeconds >= simFleetMin.Seconds()
		speed.Target, speed.Met = fmt.Sprintf(">= %dx", simFleetGoal), ratio >= simFleetGoal
	}
	rate.Samples, speed.Samples = r.Schedules, r.Schedules
	figures := []benchreport.Figure{rate, speed}
	if r.Replayed > 0 { // every Fidelty-th seed ran twice: the share whose second trace was the first's
		same := 100 * float64(r.Replayed-r.Diverged) / float64(r.Replayed)
		replay := benchreport.Single(name+": seeds replayed with an identical trace", "%", same,
			"a replay that repeats every step", 100, "informational (goal: 100)", true)
		replay.Samples = r.Replayed
		figures = append(figures, replay)
	}
	if !w.fleet {
		hour := benchreport.Single(fmt.Sprintf("%s: micro-schedules per hour, extrapolated from a %v batch", name, budget),
			"schedules/h", perSec*3600, atRealTime, 3600/each, fmt.Sprintf(">= %d", simMicroGoal), perSec*3600 >= simMicroGoal)
		hour.Samples = r.Schedules
		figures = append(figures, hour)
	}
	return figures
}

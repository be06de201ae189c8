package sim_test

import (
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// The simulator's environment contract (shared with the world/scheduler package, issue #42):
//
//	SIM_SEED   hex; replay one seed and log its readable per-process timeline
//	SIM_BUDGET Go duration; how long a batch runs (default defaultBudget, a slice for make test)
//	SIM_SEEDS  optional; the most seeds a batch runs
const (
	envSeed   = "SIM_SEED"
	envBudget = "SIM_BUDGET"
	envSeeds  = "SIM_SEEDS"

	defaultBudget = 15 * time.Second
)

// simEnv is the batch's environment, parsed.
type simEnv struct {
	replay   bool
	seed     uint64
	budget   time.Duration
	maxSeeds int
}

func loadSimEnv(t testing.TB) simEnv {
	t.Helper()
	e := simEnv{budget: defaultBudget}
	if s := os.Getenv(envSeed); s != "" {
		seed, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(s), "0x"), 16, 64)
		if err != nil {
			t.Fatalf("%s=%q: must be a hexadecimal seed (e.g. 0x2a): %v", envSeed, s, err)
		}
		e.replay, e.seed = true, seed
	}
	if s := os.Getenv(envBudget); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: must be a positive Go duration (e.g. 15s, 10m)", envBudget, s)
		}
		e.budget = d
	}
	if s := os.Getenv(envSeeds); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("%s=%q: must be a positive count of seeds", envSeeds, s)
		}
		e.maxSeeds = n
	}
	return e
}

// conformanceSeeds are the scripts a conformance test runs: SIM_SEED alone, or SIM_SEEDS (default
// 6) seeds from a fixed base, so that every run of make test compares the same scripts.
func conformanceSeeds(t testing.TB) []uint64 {
	e := loadSimEnv(t)
	if e.replay {
		return []uint64{e.seed}
	}
	n := 6
	if e.maxSeeds > 0 {
		n = e.maxSeeds
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = 0xc0f0 + uint64(i)
	}
	return seeds
}

// splitmix is the i-th seed of a batch: well spread, and the same on every machine.
func splitmix(i uint64) uint64 {
	z := i*0x9e3779b97f4a7c15 + 0x5eed
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// minJudged is how many schedules a batch needs before a probe it never hit fails it: a slice that
// small says nothing about exploration.
const minJudged = 100

// hashEvery is how often a passing seed is run twice to check that its trace repeats.
const hashEvery = 50

// schedule runs one seed's world inside the synctest bubble it is given.
type schedule func(t *testing.T, seed uint64, verbose bool) outcome

// runOnce runs seed in a bubble of its own.
func runOnce(t *testing.T, run schedule, seed uint64, verbose bool) outcome {
	var o outcome
	synctest.Test(t, func(t *testing.T) { o = run(t, seed, verbose) })
	return o
}

// repeats runs seed again and reports whether its trace hash is the same.
func repeats(t *testing.T, run schedule, o outcome) bool {
	again := runOnce(t, run, o.seed, false)
	if again.hash != o.hash {
		t.Errorf("seed %#x is not deterministic: its trace differs between two runs", o.seed)
		for i := range min(len(o.trace), len(again.trace)) {
			if o.trace[i] != again.trace[i] {
				t.Logf("first difference at line %d:\n  first:  %s\n  second: %s", i, o.trace[i], again.trace[i])
				break
			}
		}
		return false
	}
	return true
}

// batch runs schedules seed after seed until SIM_BUDGET or SIM_SEEDS is used up, or replays
// SIM_SEED with its timeline. It stops at the first seed that breaks an invariant, checks that seed
// (and one passing seed in hashEvery) repeats its trace, and prints one summary line.
func batch(t *testing.T, name string, run schedule) {
	env := loadSimEnv(t)
	if env.replay {
		o := runOnce(t, run, env.seed, testing.Verbose())
		t.Logf("seed %#x timeline:\n%s", env.seed, strings.Join(o.trace, "\n"))
		lanes := make([]string, 0, len(o.lanes))
		for lane := range o.lanes {
			lanes = append(lanes, lane)
		}
		sort.Strings(lanes)
		for _, lane := range lanes {
			t.Logf("seed %#x, %s alone:\n%s", env.seed, lane, strings.Join(o.lanes[lane], "\n"))
		}
		for _, v := range o.violations {
			t.Errorf("seed %#x: %s", env.seed, v)
		}
		repeats(t, run, o)
		return
	}
	began := time.Now()
	var n int
	var simulated time.Duration
	probes := map[string]int{}
	var failed *outcome
	for ; time.Since(began) < env.budget && (env.maxSeeds == 0 || n < env.maxSeeds); n++ {
		o := runOnce(t, run, splitmix(uint64(n)), false)
		simulated += o.simulated
		for k, v := range o.probes {
			probes[k] += v
		}
		if len(o.violations) > 0 {
			failed = &o
			n++
			break
		}
		if n%hashEvery == 0 {
			repeats(t, run, o)
		}
	}
	real := time.Since(began)
	hit, missed := probeSummary(probes)
	violations := 0
	if failed != nil {
		violations = len(failed.violations)
	}
	summary := fmt.Sprintf("%s: %d schedules in %v, %.1f schedules/s, simulated/real %.0fx, violations %d, probes hit [%s] missed %v",
		name, n, real.Round(time.Millisecond), float64(n)/real.Seconds(), simulated.Seconds()/real.Seconds(), violations, hit, missed)
	fmt.Println(summary)
	t.Log(summary)
	if failed != nil {
		repeats(t, run, *failed)
		t.Errorf("seed %#x (schedule %d of the batch) breaks an invariant; replay it with %s=%#x\n%s\ntimeline:\n%s",
			failed.seed, n, envSeed, failed.seed, strings.Join(failed.violations, "\n"), strings.Join(failed.trace, "\n"))
		return
	}
	if n >= minJudged && len(missed) > 0 {
		t.Errorf("%s: %d schedules never hit the probes %v: the simulator stopped exploring", name, n, missed)
	}
}

func probeSummary(probes map[string]int) (string, []string) {
	var missed []string
	for _, p := range allProbes {
		if probes[p] == 0 {
			missed = append(missed, p)
		}
	}
	return sortedProbes(probes), missed
}

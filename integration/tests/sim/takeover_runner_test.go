package sim_test

import (
	"os"
	"strconv"
	"strings"
	"testing"
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

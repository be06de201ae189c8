package sim

import (
	"fmt"
	"maps"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment variables of a batch.
const (
	EnvSeed     = "SIM_SEED"      // hex seed: replay that one schedule
	EnvTrace    = "SIM_TRACE"     // file for the replayed schedule's timeline (default: the test log)
	EnvTraceDir = "SIM_TRACE_DIR" // directory for the timelines of violating schedules (default: the log's tail)
	EnvBudget   = "SIM_BUDGET"    // Go duration a batch runs for
	EnvSeeds    = "SIM_SEEDS"     // maximum number of seeds a batch runs
	EnvFirst    = "SIM_FIRST"     // hex seed a batch starts from (default 1)
	EnvStop     = "SIM_STOP"      // "first": end the batch at its first violating seed (mutant runs)
	EnvReport   = "SIM_REPORT"    // file the batch writes its summary to, one key=value a line (ReportKeys)
)

// Report is what a batch writes to its SIM_REPORT file, one key=value a line (ReportKeys), and
// ReadReport reads back: make sim-mutants reads the seeds to find, make bench the speed figures.
type Report struct {
	Schedules   int // schedules run (a replay of one is not counted again)
	Violations  int // violating schedules
	SeedsToFind int // schedules run up to the first violating one (0: none violated)
	Replayed    int // schedules run a second time to compare their traces
	Diverged    int // of those, the ones whose second trace differed
	// SecondsToFind is the wall time until the first violating schedule was found.
	SecondsToFind float64
	// SimulatedSeconds is the simulated time of all the schedules, RealSeconds the wall time of the
	// whole batch (the replays included): their ratio is the batch's speed against real time.
	SimulatedSeconds, RealSeconds float64
	// ShortestSimulatedSeconds is the simulated time of the batch's shortest schedule.
	ShortestSimulatedSeconds float64
}

// reportField is one line of the report: its key and its field (*int or *float64).
type reportField struct {
	key string
	ptr any
}

// fields pairs each key of the report with its field, in the file's order.
func (r *Report) fields() []reportField {
	return []reportField{
		{"schedules", &r.Schedules}, {"violations", &r.Violations}, {"seeds_to_find", &r.SeedsToFind},
		{"seconds_to_find", &r.SecondsToFind}, {"replayed", &r.Replayed}, {"diverged", &r.Diverged},
		{"simulated_seconds", &r.SimulatedSeconds}, {"real_seconds", &r.RealSeconds},
		{"shortest_simulated_seconds", &r.ShortestSimulatedSeconds},
	}
}

// ReportKeys are the keys of the SIM_REPORT file, in order.
var ReportKeys = func() []string {
	var keys []string
	for _, f := range (&Report{}).fields() {
		keys = append(keys, f.key)
	}
	return keys
}()

// String is the report as its file holds it.
func (r Report) String() string {
	var out strings.Builder
	for _, f := range r.fields() {
		switch p := f.ptr.(type) {
		case *int:
			fmt.Fprintf(&out, "%s=%d\n", f.key, *p)
		case *float64:
			fmt.Fprintf(&out, "%s=%.3f\n", f.key, *p)
		}
	}
	return out.String()
}

// ReadReport reads a batch's SIM_REPORT file; a missing key or a malformed value is an error naming it.
func ReadReport(path string) (Report, error) {
	var r Report
	data, err := os.ReadFile(path)
	if err != nil {
		return r, fmt.Errorf("%s: %w", EnvReport, err)
	}
	vals := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		vals[k] = v
	}
	for _, f := range r.fields() {
		v, ok := vals[f.key]
		if !ok {
			return r, fmt.Errorf("%s %s: no %q line", EnvReport, path, f.key)
		}
		switch p := f.ptr.(type) {
		case *int:
			*p, err = strconv.Atoi(v)
		case *float64:
			*p, err = strconv.ParseFloat(v, 64)
		}
		if err != nil {
			return r, fmt.Errorf("%s %s: %s must be a number, got %q", EnvReport, path, f.key, v)
		}
	}
	return r, nil
}

// DefaultBudget keeps the slice of a batch in make test small: the batches under -race (eight, 80 s)
// stay within two minutes of the integration phase; with the models' conformance runs the package
// takes about 130 s of test time (2m13s with five batches of 15 s each, beside the other packages on
// 2 cores). make sim sets its own budget.
const DefaultBudget = 10 * time.Second

// MinSchedulesForProbes is how many schedules a batch needs before a probe it never hit fails it:
// the -race slice in make test on a loaded machine may run only a dozen, and a rare event missed in a
// dozen is chance, not a simulator that stopped exploring (make sim runs thousands).
const MinSchedulesForProbes = 50

// GCPercent is the garbage collector's target a batch runs with unless GOGC is set: a schedule
// allocates fast and keeps little (a world, its models, one trace), so the default of 100 spends a
// sixth of the heartbeat world's CPU collecting (miniredis builds a Lua state per script call) and a
// twelfth of the election world's. 400 costs some tens of MiB of heap and changes nothing checked.
const GCPercent = 400

// Runner runs one schedule.
type Runner func(t *testing.T, seed uint64, keep bool) Result

// Batch is a batch's settings, read from the environment by BatchFromEnv.
type Batch struct {
	Name        string
	Budget      time.Duration
	Seeds       int
	First       uint64
	Replay      bool
	Trace       string
	Probes      []string // probes the batch must hit
	Fidelty     int      // rerun every n-th passing seed to compare traces (0: never)
	StopAtFirst bool
	Report      string
	// ExactReplay makes a passing seed whose second run diverged a failure: for a world whose
	// scheduler leaves nothing to the Go runtime (the takeover world), not for the election world.
	ExactReplay bool
}

// BatchFromEnv reads the batch settings; a malformed variable is an error naming it.
func BatchFromEnv(name string, probes []string) (Batch, error) {
	b := Batch{Name: name, Budget: DefaultBudget, First: 1, Probes: probes, Fidelty: 10, Trace: os.Getenv(EnvTrace),
		Report: os.Getenv(EnvReport)}
	switch v := os.Getenv(EnvStop); v {
	case "":
	case "first":
		b.StopAtFirst = true
	default:
		return b, fmt.Errorf("%s: must be empty or \"first\", got %q", EnvStop, v)
	}
	if v := os.Getenv(EnvBudget); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return b, fmt.Errorf("%s: must be a positive Go duration such as 2m, got %q", EnvBudget, v)
		}
		b.Budget = d
	}
	if v := os.Getenv(EnvSeeds); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n <= 0 {
			return b, fmt.Errorf("%s: must be a positive integer, got %q", EnvSeeds, v)
		}
		b.Seeds = n
	}
	for env, dst := range map[string]*uint64{EnvSeed: &b.First, EnvFirst: &b.First} {
		if v := os.Getenv(env); v != "" {
			s, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(v), "0x"), 16, 64)
			if err != nil {
				return b, fmt.Errorf("%s: must be a hex seed such as 0x1f, got %q", env, v)
			}
			*dst = s
			b.Replay = b.Replay || env == EnvSeed
		}
	}
	return b, nil
}

// ConformanceSeeds are the seeds of a conformance test's scripts: SIM_SEED alone, or SIM_SEEDS
// (default n) seeds from base, so that every run of make test compares the same scripts.
func ConformanceSeeds(n int, base uint64) ([]uint64, error) {
	b, err := BatchFromEnv("conformance", nil)
	if err != nil {
		return nil, err
	}
	if b.Replay {
		return []uint64{b.First}, nil
	}
	if b.Seeds > 0 {
		n = b.Seeds
	}
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = base + uint64(i)
	}
	return seeds, nil
}

// Summary is what a batch did.
type Summary struct {
	Schedules, Violating, Replayed, Diverged int
	Real, Simulated                          time.Duration
	Shortest                                 time.Duration // simulated time of the shortest schedule
	Probes                                   map[string]int
	FirstFailing                             uint64
	SeedsToFind                              int           // schedules run up to the first violating one
	TimeToFind                               time.Duration // wall time until it was found
}

func (s Summary) String() string {
	var hit, missed []string
	for p, n := range s.Probes {
		if n > 0 {
			hit = append(hit, fmt.Sprintf("%s=%d", p, n))
		} else {
			missed = append(missed, p)
		}
	}
	sort.Strings(hit)
	sort.Strings(missed)
	return fmt.Sprintf("schedules=%d schedules/s=%.2f sim/real=%.0fx violations=%d replay=%d/%d identical probes hit=[%s] missed=[%s]",
		s.Schedules, float64(s.Schedules)/s.Real.Seconds(), s.Simulated.Seconds()/s.Real.Seconds(), s.Violating,
		s.Replayed-s.Diverged, s.Replayed, strings.Join(hit, " "), strings.Join(missed, " "))
}

// Run runs the batch: one replayed seed, or seeds from First until the budget or Seeds is spent.
// Every failing seed is run twice and its traces compared, and so is every Fidelty-th passing one.
// It fails t on violations, on a replay that diverged (ExactReplay batches), and on a probe the batch
// never hit.
func (b Batch) Run(t *testing.T, run Runner) Summary {
	t.Helper()
	if os.Getenv("GOGC") == "" {
		defer debug.SetGCPercent(debug.SetGCPercent(GCPercent))
	}
	sum := Summary{Probes: map[string]int{}}
	for _, p := range b.Probes {
		sum.Probes[p] = 0
	}
	start := time.Now()
	for seed := b.First; ; seed++ {
		if b.Replay && seed != b.First || !b.Replay && (time.Since(start) > b.Budget || b.Seeds > 0 && sum.Schedules >= b.Seeds) {
			break
		}
		res := run(t, seed, true) // the lines are kept: a failing run's own timeline is the evidence
		sum.Schedules++
		sum.Simulated += res.Simulated
		if sum.Schedules == 1 || res.Simulated < sum.Shortest {
			sum.Shortest = res.Simulated
		}
		for p, n := range res.Probes {
			sum.Probes[p] += n
		}
		failed := len(res.Violations) > 0
		if failed {
			if sum.Violating == 0 {
				sum.FirstFailing, sum.SeedsToFind, sum.TimeToFind = seed, sum.Schedules, time.Since(start)
			}
			sum.Violating++
			t.Errorf("%s seed %#x (%s): %d violations, first: %s\n\treplay: SIM_SEED=%#x make sim", b.Name, seed, res.Setup,
				len(res.Violations), res.Violations[0], seed)
			b.writeFailure(t, res)
		}
		if b.Replay || failed || b.Fidelty > 0 && sum.Schedules%b.Fidelty == 1 {
			sum.Replayed++
			if !b.replays(t, run, res) {
				sum.Diverged++
			}
		}
		if b.Replay {
			b.writeTrace(t, res)
		}
		if failed && b.StopAtFirst {
			break
		}
	}
	sum.Real = time.Since(start)
	t.Logf("%s: %s", b.Name, sum)
	b.writeReport(t, sum)
	if !b.Replay && !b.StopAtFirst {
		if sum.Schedules < MinSchedulesForProbes {
			t.Logf("%s: probes not judged: %d schedules, fewer than %d", b.Name, sum.Schedules, MinSchedulesForProbes)
			return sum
		}
		for p, n := range sum.Probes {
			if n == 0 {
				t.Errorf("%s: probe %q never hit in %d schedules: the simulator stopped exploring", b.Name, p, sum.Schedules)
			}
		}
	}
	return sum
}

// replays runs res's seed a second time and reports whether its trace is the same. The second run
// keeps its lines only for an ExactReplay batch, which fails on a difference and shows the first.
func (b Batch) replays(t *testing.T, run Runner, res Result) bool {
	t.Helper()
	again := run(t, res.Seed, b.ExactReplay)
	if again.Hash == res.Hash {
		return true
	}
	if !b.ExactReplay {
		t.Logf("%s seed %#x: a second run diverged (trace %016x vs %016x)", b.Name, res.Seed, res.Hash, again.Hash)
		return false
	}
	first, second := strings.Split(res.Timeline, "\n"), strings.Split(again.Timeline, "\n")
	i := 0
	for i < min(len(first), len(second)) && first[i] == second[i] {
		i++
	}
	at := func(lines []string) string {
		if i < len(lines) {
			return lines[i]
		}
		return "(end of the trace)"
	}
	t.Errorf("%s seed %#x is not deterministic: its trace differs between two runs, first at line %d:\n  first:  %s\n  second: %s",
		b.Name, res.Seed, i, at(first), at(second))
	return false
}

// writeFailure keeps a violating run's own timeline (a replay may diverge): in SIM_TRACE_DIR, or the
// last lines in the test log.
func (b Batch) writeFailure(t *testing.T, res Result) {
	t.Helper()
	dir := os.Getenv(EnvTraceDir)
	if dir == "" {
		lines := strings.Split(res.Timeline, "\n")
		t.Logf("last lines of seed %#x's timeline:\n%s", res.Seed, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		return
	}
	name := fmt.Sprintf("%s/%s-%#x.txt", dir, b.Name, res.Seed)
	if err := os.WriteFile(name, []byte(res.Timeline+"\n"), 0o644); err != nil {
		t.Errorf("%s: %v", EnvTraceDir, err)
		return
	}
	t.Logf("timeline of seed %#x: %s", res.Seed, name)
}

func (b Batch) writeTrace(t *testing.T, res Result) {
	t.Helper()
	if b.Trace == "" {
		t.Logf("timeline of seed %#x (%s):\n%s", res.Seed, res.Setup, res.Timeline)
		for _, lane := range slices.Sorted(maps.Keys(res.Lanes)) {
			t.Logf("seed %#x, %s alone:\n%s", res.Seed, lane, res.Lanes[lane])
		}
		return
	}
	if err := os.WriteFile(b.Trace, []byte(res.Timeline+"\n"), 0o644); err != nil {
		t.Errorf("%s: %v", EnvTrace, err)
	}
}

// Report is the summary as the SIM_REPORT file holds it.
func (s Summary) Report() Report {
	return Report{Schedules: s.Schedules, Violations: s.Violating, SeedsToFind: s.SeedsToFind, Replayed: s.Replayed,
		Diverged: s.Diverged, SecondsToFind: s.TimeToFind.Seconds(), SimulatedSeconds: s.Simulated.Seconds(),
		RealSeconds: s.Real.Seconds(), ShortestSimulatedSeconds: s.Shortest.Seconds()}
}

func (b Batch) writeReport(t *testing.T, s Summary) {
	t.Helper()
	if b.Report == "" {
		return
	}
	if err := os.WriteFile(b.Report, []byte(s.Report().String()), 0o644); err != nil {
		t.Errorf("%s: %v", EnvReport, err)
	}
}

package sim_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/sim"
)

// TestReportRoundTrip holds the SIM_REPORT file to its reader: what a batch writes, make bench and
// make sim-mutants read back, and a file missing a key is an error naming the key.
func TestReportRoundTrip(t *testing.T) {
	sum := sim.Summary{Schedules: 12, Violating: 1, Replayed: 3, Diverged: 1, SeedsToFind: 4, TimeToFind: 1500 * time.Millisecond,
		Real: 30 * time.Second, Simulated: 900 * time.Second, Shortest: 65 * time.Second}
	want := sim.Report{Schedules: 12, Violations: 1, SeedsToFind: 4, Replayed: 3, Diverged: 1, SecondsToFind: 1.5,
		SimulatedSeconds: 900, RealSeconds: 30, ShortestSimulatedSeconds: 65}
	path := filepath.Join(t.TempDir(), "report")
	if err := os.WriteFile(path, []byte(sum.Report().String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := sim.ReadReport(path)
	if err != nil || got != want {
		t.Fatalf("ReadReport = %+v, %v; want %+v", got, err, want)
	}
	for _, k := range sim.ReportKeys {
		if !strings.Contains(sum.Report().String(), "\n"+k+"=") && !strings.HasPrefix(sum.Report().String(), k+"=") {
			t.Errorf("the report has no %s line", k)
		}
	}
	cut := strings.Replace(sum.Report().String(), "real_seconds=", "real=", 1)
	if err := os.WriteFile(path, []byte(cut), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := sim.ReadReport(path); err == nil || !strings.Contains(err.Error(), `"real_seconds"`) {
		t.Errorf("ReadReport of a file without real_seconds: %v, want an error naming it", err)
	}
}

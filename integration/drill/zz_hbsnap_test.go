package drill

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
	"time"
)

// Temporary (not committed): prints a fabricated report's table and JSON to compare before/after.
func TestHBSnapshot(t *testing.T) {
	d := testDrill()
	d.started = at(0)
	d.cfg.Seed = 42
	f := &Fault{N: 1, Kind: KindSIGKILL, Target: "w1-0", Started: at(100), Ended: at(5000), Notes: []string{"restarted as w1-1"},
		Affected: []string{"q1"}, NewRuns: 2, Rebalanced: 1, Latencies: []time.Duration{2100 * time.Millisecond}}
	f.Steps = []*Step{{Fault: f, Name: "kill", At: at(100), End: at(3000), Settled: time.Second, Changes: []QueueChange{{Queue: "q1", From: "a", Terms: []string{"b@2"}, Runs: []string{"r"}, Latency: time.Second}}}}
	o := &Fault{N: 2, Kind: KindOrphan, Target: "solo1-0", Started: at(6000), Ended: at(9000), CleanupLatency: 7 * time.Second}
	d.faults = []*Fault{f, o}
	d.violations = []Violation{{Check: CheckOneOwner, Queue: "q1", At: at(200), Detail: "x"}, {Check: CheckLoadLost, At: at(20000), Detail: "y"}}
	d.skipped = []string{"redis-restart: external"}
	d.loadStats = &LoadStats{Rate: 2, Queues: []string{"q1"}, Sent: 10, Accepted: 9, Handled: 9, P50: time.Second}
	r := d.report(true)
	r.Duration = 30 * time.Second
	var buf bytes.Buffer
	r.WriteTable(&buf)
	b, _ := json.MarshalIndent(r, "", "  ")
	buf.Write(b)
	os.WriteFile(os.Getenv("HB_SNAP"), buf.Bytes(), 0o644)
}

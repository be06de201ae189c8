package benchreport

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPercentileNearestRank(t *testing.T) {
	s := []float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for p, want := range map[float64]float64{50: 5, 95: 10, 99: 10, 10: 1} {
		if got := Percentile(s, p); got != want {
			t.Errorf("p%v = %v, want %v", p, got, want)
		}
	}
	if Percentile[float64](nil, 50) != 0 {
		t.Error("empty samples must give 0")
	}
}

func TestReportTableAndJSON(t *testing.T) {
	f := NewFigure("graceful handover", "ms", []float64{1, 2, 3}, "bare election", []float64{10, 20, 30}, "p95 <= 50 ms",
		func(f Figure) bool { return f.P95 <= 50 })
	var buf bytes.Buffer
	Print(&buf, []Figure{f})
	if !strings.Contains(buf.String(), "graceful handover") || !strings.Contains(buf.String(), "yes") {
		t.Fatalf("table: %s", buf.String())
	}
	path := filepath.Join(t.TempDir(), "r.json")
	if err := Write(path, []Figure{f}); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	var got []map[string]any
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"name", "unit", "p50", "p95", "p99", "baseline_p95", "target"} {
		if _, ok := got[0][k]; !ok {
			t.Errorf("bench-results.json object lacks %q", k)
		}
	}
}

// Package benchreport turns samples into the figures `make bench` prints and writes to
// bench-results.json: every figure beside the same figure for its baseline, measured in the same run,
// and its target.
package benchreport

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

// Figure is one line of the report and one object of bench-results.json.
type Figure struct {
	Name        string  `json:"name"`
	Unit        string  `json:"unit"`
	Samples     int     `json:"samples"`
	P50         float64 `json:"p50"`
	P95         float64 `json:"p95"`
	P99         float64 `json:"p99"`
	Baseline    string  `json:"baseline"`
	BaselineP50 float64 `json:"baseline_p50"`
	BaselineP95 float64 `json:"baseline_p95"`
	Target      string  `json:"target"`
	Met         bool    `json:"met"`
}

// Percentile returns the p-th percentile (0..100) of samples by the nearest-rank method.
func Percentile(samples []float64, p float64) float64 {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	rank := int(p/100*float64(len(s))+0.5) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

// Millis converts durations to milliseconds.
func Millis(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d) / float64(time.Millisecond)
	}
	return out
}

// NewFigure summarises samples and baseline samples of the same quantity. met decides, from the
// figure itself, whether the target holds.
func NewFigure(name, unit string, samples []float64, baseline string, baselineSamples []float64, target string, met func(f Figure) bool) Figure {
	f := Figure{
		Name: name, Unit: unit, Samples: len(samples),
		P50: Percentile(samples, 50), P95: Percentile(samples, 95), P99: Percentile(samples, 99),
		Baseline: baseline, BaselineP50: Percentile(baselineSamples, 50), BaselineP95: Percentile(baselineSamples, 95),
		Target: target,
	}
	f.Met = met(f)
	return f
}

// Print writes the figures as a table.
func Print(w io.Writer, figures []Figure) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\tn\tp50\tp95\tp99\tbaseline\tbaseline p50\tbaseline p95\ttarget\tmet")
	for _, f := range figures {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.2f\t%.2f\t%.2f\t%s\t%.2f\t%.2f\t%s\t%s\n",
			f.Name, f.Unit, f.Samples, f.P50, f.P95, f.P99, f.Baseline, f.BaselineP50, f.BaselineP95, f.Target, yesNo(f.Met))
	}
	tw.Flush()
}

// Write stores the figures as a JSON array at path.
func Write(path string, figures []Figure) error {
	data, err := json.MarshalIndent(figures, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

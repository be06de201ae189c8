package drill

import (
	"context"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/baton-run/baton/fxmodule"
)

// cleanEnv is this process's environment without the BATON_* variables a demo worker would refuse
// or should not inherit: only the client settings (endpoints, credentials, TLS files) are kept, and
// the drill sets the endpoints it wants after them (the last value of a key wins).
func cleanEnv() []string {
	keep := map[string]bool{}
	for _, k := range fxmodule.ClientEnvVars() {
		keep[k] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == envTemporalChild || (strings.HasPrefix(k, "BATON_") && !keep[k]) {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), n)
}

// percentile returns the p-th percentile (0..100, nearest rank) of ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(p/100*float64(len(s))+0.999999) - 1
	return s[min(max(rank, 0), len(s)-1)]
}

func shortRun(runID string) string { return runID[max(0, len(runID)-8):] }

func fmtDur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

package drill

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/baton-run/baton/integration/tools/benchreport"
)

// Report is what a drill found.
type Report struct {
	Started  time.Time     `json:"started"`
	Duration time.Duration `json:"duration_ns"`
	// Complete is false when the drill was interrupted before its checks ran.
	Complete bool        `json:"complete"`
	Config   Config      `json:"config"`
	Servers  Servers     `json:"servers"`
	Skipped  []string    `json:"skipped_kinds,omitempty"`
	Faults   []*Fault    `json:"faults"`
	Kinds    []KindStats `json:"latency_by_kind"`
	Checks   CheckStats  `json:"checks"`
	// Load is what became of the load phase's requests (nil without LoadRate, or when the producer
	// did not get to the end).
	Load       *LoadStats  `json:"load,omitempty"`
	Violations []Violation `json:"violations"`
	// Logs is the directory holding every process's log, when it outlives the drill.
	Logs string `json:"logs,omitempty"`
}

// Servers tells where the servers ran.
type Servers struct {
	Etcd             []string `json:"etcd"`
	EtcdExternal     bool     `json:"etcd_external"`
	Temporal         string   `json:"temporal"`
	TemporalExternal bool     `json:"temporal_external"`
	Redis            string   `json:"redis"`
	RedisExternal    bool     `json:"redis_external"`
}

// KindStats is the takeover latency of one fault kind: from the injection instant to the start of
// the new leader's dispatcher run, per affected queue.
type KindStats struct {
	Kind    Kind          `json:"kind"`
	Faults  int           `json:"faults"`
	Samples int           `json:"samples"`
	P50     time.Duration `json:"p50_ns"`
	P95     time.Duration `json:"p95_ns"`
	Max     time.Duration `json:"max_ns"`
	// Cleanup is, for the orphan kind, the slowest orphan cleanup.
	Cleanup time.Duration `json:"max_cleanup_ns,omitempty"`
}

// CheckStats counts what the checks looked at.
type CheckStats struct {
	Terms          int           `json:"terms"`
	Runs           int           `json:"runs"`
	StatusSamples  int           `json:"status_samples"`
	OrphanChecks   int           `json:"orphan_checks"`
	OrphanEpisodes int           `json:"orphan_episodes"`
	MaxOrphanAge   time.Duration `json:"max_orphan_age_ns"`
	Processes      int           `json:"processes"`
}

// OK reports whether the drill ran to the end and found no violation.
func (r *Report) OK() bool { return r.Complete && len(r.Violations) == 0 }

func (d *Drill) report(complete bool) *Report {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := &Report{
		Started: d.started, Duration: time.Since(d.started), Complete: complete,
		Config:     d.cfg,
		Skipped:    d.skipped,
		Load:       d.loadStats,
		Faults:     d.faults,
		Violations: append([]Violation{}, d.violations...),
		Checks:     d.checks,
	}
	r.Checks.Processes = len(d.procs)
	// Run reports only after the servers are up.
	r.Servers = Servers{Etcd: d.etcd.Endpoints(), EtcdExternal: d.etcd.External(), Temporal: d.temporal.HostPort(),
		TemporalExternal: d.temporal.External(), Redis: d.redis.Addr(), RedisExternal: d.redis.External()}
	if !d.tempDir || len(d.violations) > 0 {
		r.Logs = d.dir
	}
	// Violations not tied to a fault by their check belong to the fault during which they happened.
	for i := range r.Violations {
		v := &r.Violations[i]
		if v.Fault == 0 {
			for _, f := range d.faults {
				if !v.At.Before(f.Started) && (f.Ended.IsZero() || !v.At.After(f.Ended.Add(d.cfg.Settle))) {
					v.Fault = f.N
				}
			}
		}
		if v.Fault > 0 && v.Fault <= len(d.faults) {
			d.faults[v.Fault-1].Violations++
		}
	}
	sort.SliceStable(r.Violations, func(i, j int) bool { return r.Violations[i].At.Before(r.Violations[j].At) })
	for _, k := range AllKinds {
		ks, ls := KindStats{Kind: k}, []time.Duration(nil)
		for _, f := range d.faults {
			if f.Kind == k {
				ks.Faults++
				ls = append(ls, f.Latencies...)
				ks.Cleanup = max(ks.Cleanup, f.CleanupLatency)
			}
		}
		if ks.Faults > 0 {
			ks.Samples = len(ls)
			ks.P50, ks.P95, ks.Max = benchreport.Percentile(ls, 50), benchreport.Percentile(ls, 95), benchreport.Percentile(ls, 100)
			r.Kinds = append(r.Kinds, ks)
		}
	}
	return r
}

// WriteTable prints the fault-by-fault table, the latency per kind and the violations.
func (r *Report) WriteTable(w io.Writer) {
	fmt.Fprintf(w, "\nBaton drill: %d workers × %d queues, TTL %v, seed %d, %v\n\n", r.Config.Workers, r.Config.Queues,
		r.Config.TTL, r.Config.Seed, r.Duration.Round(time.Second))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tFAULT\tTARGET\tSTEPS\tAFFECTED\tNEW RUNS\t(REBALANCE)\tTAKEOVER p50\tTAKEOVER max\tVIOLATIONS\tNOTES")
	for _, f := range r.Faults {
		affected := fmt.Sprint(len(f.Affected))
		if n := len(f.Affected); n > 0 && n <= 3 {
			affected += " (" + strings.Join(f.Affected, ",") + ")"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%d\t%d\t%s\t%s\t%d\t%s\n", f.N, f.Kind, f.Target, len(f.Steps), affected, f.NewRuns,
			f.Rebalanced, fmtDur(benchreport.Percentile(f.Latencies, 50)), fmtDur(benchreport.Percentile(f.Latencies, 100)), f.Violations, strings.Join(f.Notes, "; "))
	}
	tw.Flush()
	fmt.Fprintln(w, "\nTakeover latency by fault kind (injection -> new leader's run started, per affected queue):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tFAULTS\tSAMPLES\tp50\tp95\tmax\t")
	for _, k := range r.Kinds {
		extra := ""
		if k.Cleanup > 0 {
			extra = "orphan cleanup max " + fmtDur(k.Cleanup)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\n", k.Kind, k.Faults, k.Samples, fmtDur(k.P50), fmtDur(k.P95), fmtDur(k.Max), extra)
	}
	tw.Flush()
	c := r.Checks
	fmt.Fprintf(w, "\nChecked: %d terms, %d dispatcher runs, %d /status samples, %d orphan checks (%d transient episodes, longest %s), %d worker processes.\n",
		c.Terms, c.Runs, c.StatusSamples, c.OrphanChecks, c.OrphanEpisodes, fmtDur(c.MaxOrphanAge), c.Processes)
	if l := r.Load; l != nil {
		fmt.Fprintf(w, "Load (SignalWorkflow, %v/s per queue on %s): sent %d, accepted %d (%d sends retried), handled %d, lost %d, "+
			"double %d, pending %d; handler re-runs %d (allowed); send -> handled p50 %s p99 %s max %s; ledger settled %s after the last send.\n",
			l.Rate, strings.Join(l.Queues, ","), l.Sent, l.Accepted, l.Retries, l.Handled, l.Lost, l.Double, l.Pending, l.Redispatched,
			fmtDur(l.P50), fmtDur(l.P99), fmtDur(l.Max), fmtDur(l.SettledAfter))
	}
	for _, s := range r.Skipped {
		fmt.Fprintf(w, "Skipped: %s\n", s)
	}
	if !r.Complete {
		fmt.Fprintln(w, "INCOMPLETE: the drill was interrupted before its checks ran.")
	}
	if len(r.Violations) == 0 {
		if r.Complete {
			fmt.Fprintln(w, "No violations.")
		}
	} else {
		fmt.Fprintf(w, "\n%d VIOLATIONS:\n", len(r.Violations))
		for _, v := range r.Violations {
			where := ""
			if v.Fault > 0 {
				where = fmt.Sprintf(" (fault #%d)", v.Fault)
			}
			if v.Queue != "" {
				where += " " + v.Queue
			}
			fmt.Fprintf(w, "  %s %s%s: %s\n", v.At.Format(tsFormat), v.Check, where, v.Detail)
		}
	}
	if r.Logs != "" {
		fmt.Fprintf(w, "Logs: %s\n", r.Logs)
	}
}

// WriteJSON writes the report as JSON to path.
func (r *Report) WriteJSON(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

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

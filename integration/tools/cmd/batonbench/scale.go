package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// The scale section (issue #17): Q queues x N workers on one etcd, through Baton (election + balance)
// beside bare concurrency.Election in the same run, for every row of the curve (-scale-rows), so that a
// cost that grows faster than queues x workers shows as a bend. The timing rows run every worker of a
// fleet in this process, Baton and bare alike, so both pay the same scheduler; memory per worker is
// measured by a fleet of child processes (scaleproc.go), each reading its own /proc/self/status.

const (
	scaleProject = "scale"
	// scaleWait bounds every wait of the section for all queues to be led; a row that misses it is
	// reported as such and the curve goes on.
	scaleWait = 2 * time.Minute
	// scaleSettleWithin bounds the wait for leadership counts to stop moving (and for a window at rest).
	scaleSettleWithin = 90 * time.Second
)

// scaleRow is one point of the curve.
type scaleRow struct{ queues, workers int }

func (r scaleRow) String() string { return fmt.Sprintf("%dx%d", r.queues, r.workers) }

// parseScaleRows reads "1000x5,3000x5".
func parseScaleRows(s string) ([]scaleRow, error) {
	var rows []scaleRow
	for f := range strings.SplitSeq(s, ",") {
		q, w, ok := strings.Cut(strings.TrimSpace(f), "x")
		nq, err1 := strconv.Atoi(q)
		nw, err2 := strconv.Atoi(w)
		if !ok || err1 != nil || err2 != nil || nq < 1 || nw < 2 {
			return nil, fmt.Errorf("-scale-rows: %q is not <queues>x<workers> with queues >= 1 and workers >= 2", f)
		}
		rows = append(rows, scaleRow{nq, nw})
	}
	return rows, nil
}

// atRest measures the etcd requests per second over a window of d in which the leadership counts did
// not change, trying again (within the bound) while they do; ok is false when no window was still, and
// the figure is then the last window's.
func (f *fleet) atRest(ctx context.Context, d, within time.Duration) (perSec float64, methods string, ok bool) {
	deadline := time.Now().Add(within)
	for {
		before, by0 := f.counts(), etcdMessages()
		select {
		case <-ctx.Done():
			return 0, "", false
		case <-time.After(d):
		}
		var parts []string
		perSec = 0
		for k, v := range etcdMessages() {
			if dv := (v - by0[k]) / d.Seconds(); dv > 0 {
				perSec += dv
				parts = append(parts, fmt.Sprintf("%s %.1f/s", k, dv))
			}
		}
		slices.Sort(parts)
		methods = strings.Join(parts, ", ")
		if slices.Equal(before, f.counts()) && f.led.Load() == int64(len(f.queues)) {
			return perSec, methods, true
		}
		if time.Now().After(deadline) {
			return perSec, methods, false
		}
	}
}

// scaleResult is what one fleet of one row measured; failed says what did not happen (the figures
// after it are missing).
type scaleResult struct {
	allLed, relead      time.Duration
	everyFirst          time.Duration // until every queue had had a leader (allLed: all led at one instant)
	reqPerSec           float64
	restOK              bool
	goroutines, rssMiB  float64 // per 1,000 elections, this process (etcd included)
	countsStart         []int
	countsRolled        []int
	startOK, rolledOK   bool
	lost, terms, overlp int
	overlap             string
	failed              string
	notLed              int      // queues not led when the wait after start gave up
	phases              []string // how long each step took, for the log
}

// fleetMode is which measurements a fleet of a row makes.
type fleetMode struct {
	bare, balance, rest, cut, roll bool
}

func runFleet(ctx context.Context, cluster *etcdx.Cluster, o options, row scaleRow, m fleetMode) (r scaleResult, err error) {
	name, kind := "Baton", "baton"
	switch {
	case m.bare:
		name, kind = "bare", "bare"
	case !m.balance:
		name, kind = "Baton without balancing", "plain"
	}
	// A project per fleet: keys a fleet leaves behind (a cut worker's, until its lease expires) are
	// never another fleet's candidates.
	f := &fleet{cluster: cluster, project: fmt.Sprintf("%s-%v-%s", scaleProject, row, kind), queues: queueNames(row.queues),
		ttl: o.scaleTTL, bare: m.bare, balance: m.balance}
	defer func() {
		f.stopAll(ctx)
		r.lost = int(f.lost.Load())
		r.overlp, r.terms, r.overlap = overlaps(f.terms)
		fmt.Printf("batonbench: scale %v (%s): %s\n", row, name, strings.Join(r.phases, ", "))
		if r.failed != "" {
			fmt.Printf("batonbench: scale %v (%s): %s\n", row, name, r.failed)
		}
	}()
	// Only a balancer moves queues once every one is led, so only its fleet waits a whole rest window
	// for still counts; the others are still once nothing changed for a second.
	still := time.Second
	if m.balance {
		still = o.scaleRest
	}
	phase := time.Now()
	took := func(what string) {
		r.phases = append(r.phases, fmt.Sprintf("%s %v", what, time.Since(phase).Round(10*time.Millisecond)))
		phase = time.Now()
	}
	debug.FreeOSMemory() // RSS deltas are otherwise blurred by what the previous fleet left to the GC
	g0, rss0 := runtime.NumGoroutine(), procMiB("/proc/self/status", "VmRSS")
	stopProfile := func() {}
	if o.scaleProfile != "" && !m.bare && m.balance {
		if stopProfile, err = startProfiles(filepath.Join(o.scaleProfile, row.String())); err != nil {
			return r, err
		}
	}
	start := time.Now()
	for i := range row.workers {
		if _, err := f.start(ctx, fmt.Sprintf("w%d", i), ""); err != nil {
			stopProfile()
			return r, err
		}
	}
	r.allLed, err = f.waitAllLed(ctx, start)
	f.mu.Lock()
	if !f.allFirstAt.IsZero() {
		r.everyFirst = f.allFirstAt.Sub(start)
	}
	f.mu.Unlock()
	stopProfile()
	took("all led")
	if err != nil {
		r.notLed = len(f.queues) - int(f.led.Load())
		r.failed = fmt.Sprintf("not every queue led within %v of start: %v", scaleWait, err)
		return r, ctx.Err()
	}
	r.countsStart, r.startOK = f.settle(ctx, still, scaleSettleWithin)
	took("counts still")
	elections := float64(row.workers*row.queues) / 1000
	debug.FreeOSMemory()
	r.goroutines = float64(runtime.NumGoroutine()-g0) / elections
	r.rssMiB = (procMiB("/proc/self/status", "VmRSS") - rss0) / elections

	if m.rest {
		var methods string
		// Counts that never settled will not be still now either: one window, reported as such.
		within := scaleSettleWithin
		if !r.startOK {
			within = 0
		}
		r.reqPerSec, methods, r.restOK = f.atRest(ctx, o.scaleRest, within)
		still := "counts still"
		if !r.restOK {
			still = fmt.Sprintf("counts never still for %v within %v", o.scaleRest, scaleSettleWithin)
		}
		fmt.Printf("batonbench: scale %v (%s): etcd at rest (%s): %s\n", row, name, still, methods)
		took("at rest")
	}
	if m.cut {
		// Cut off the worker that leads most, as a crash would; the others take its queues.
		var victim *fleetWorker
		for _, w := range f.workers {
			if victim == nil || w.leading.Load() > victim.leading.Load() {
				victim = w
			}
		}
		cut := time.Now()
		victim.cut = true
		victim.proxy.Blackhole()
		// Its watchdog ends its terms first; until then every queue still counts as led.
		if err := harness.Poll(ctx, scaleWait, time.Millisecond, func() error {
			if f.led.Load() == int64(len(f.queues)) {
				return fmt.Errorf("the cut worker still leads")
			}
			return nil
		}); err != nil {
			r.failed = fmt.Sprintf("the cut worker's terms did not end within %v", scaleWait)
			return r, ctx.Err()
		}
		if r.relead, err = f.waitAllLed(ctx, cut); err != nil {
			r.failed = fmt.Sprintf("not every queue led again within %v of the cut: %v", scaleWait, err)
			return r, ctx.Err()
		}
		took("cut and re-led")
	}
	if m.roll {
		// Rolling restart of every worker, a cut one included: each stops (resigning its terms), a new
		// one starts, and the next goes once every queue is led.
		for i, w := range slices.Clone(f.workers) {
			f.stop(ctx, w)
			if _, err := f.start(ctx, fmt.Sprintf("w%d-r", i), ""); err != nil {
				return r, err
			}
			if _, err := f.waitAllLed(ctx, time.Now()); err != nil {
				r.failed = fmt.Sprintf("not every queue led within %v during the rolling restart: %v", scaleWait, err)
				return r, ctx.Err()
			}
		}
		took("rolling restart")
		r.countsRolled, r.rolledOK = f.settle(ctx, still, scaleSettleWithin)
		took("counts still")
	}
	return r, nil
}

// startProfiles records CPU, mutex and block profiles into dir until the returned func is called.
func startProfiles(dir string) (func(), error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	cpu, err := os.Create(filepath.Join(dir, "cpu.pprof"))
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(cpu); err != nil {
		cpu.Close()
		return nil, err
	}
	runtime.SetMutexProfileFraction(5)
	runtime.SetBlockProfileRate(int(time.Millisecond))
	return func() {
		pprof.StopCPUProfile()
		cpu.Close()
		_ = writeProfiles(dir, "", "mutex", "block", "goroutine")
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
	}, nil
}

// writeProfiles writes the named runtime profiles into dir as <prefix><name>.pprof, after a garbage
// collection so that a heap profile shows what is live.
func writeProfiles(dir, prefix string, names ...string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	runtime.GC()
	for _, name := range names {
		f, err := os.Create(filepath.Join(dir, prefix+name+".pprof"))
		if err != nil {
			return err
		}
		if err := cmp.Or(pprof.Lookup(name).WriteTo(f, 0), f.Close()); err != nil {
			return err
		}
	}
	return nil
}

// etcdMessages sums, per method, the gRPC messages the in-process etcd servers received (their own
// metrics).
func etcdMessages() map[string]float64 {
	by := map[string]float64{}
	mfs, _ := prometheus.DefaultGatherer.Gather() // what it gathered, even if a collector failed
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if mf.GetName() == "grpc_server_msg_received_total" && l.GetName() == "grpc_method" {
					by[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return by
}

// procMiB reads a "<n> kB" line (VmRSS, VmHWM) of a /proc status file, in MiB.
func procMiB(path, key string) float64 {
	kb, _ := strconv.ParseFloat(strings.TrimSuffix(benchreport.ProcValue(path, key), " kB"), 64)
	return kb / 1024
}

// benchScale measures every row of the curve, then memory per worker process.
func benchScale(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	rows, err := parseScaleRows(o.scaleRows)
	if err != nil {
		return nil, err
	}
	ttl := cmp.Or(o.scaleTTL, election.DefaultConfig().TTL) // the lease TTL the section's workers run with
	fmt.Printf("batonbench: scale: rows %v, TTL %v\n", rows, ttl)
	var figures []benchreport.Figure
	type curvePoint struct {
		row         scaleRow
		baton, bare scaleResult
	}
	var curve []curvePoint
	for i, row := range rows {
		// The first row (every row with -scale-10k) measures everything; the others are points of the
		// curve (start-up, rest, safety), which keeps the default bench within its budget.
		full := i == 0 || o.scale10k
		began := time.Now()
		baton, err := runFleet(ctx, s.cluster, o, row, fleetMode{balance: true, rest: true, cut: full, roll: full})
		if err != nil {
			return nil, fmt.Errorf("%v baton: %w", row, err)
		}
		bare, err := runFleet(ctx, s.cluster, o, row, fleetMode{bare: true, rest: true, cut: full})
		if err != nil {
			return nil, fmt.Errorf("%v bare: %w", row, err)
		}
		var plain scaleResult
		if full {
			if plain, err = runFleet(ctx, s.cluster, o, row, fleetMode{roll: true}); err != nil {
				return nil, fmt.Errorf("%v without balancing: %w", row, err)
			}
		}
		curve = append(curve, curvePoint{row, baton, bare})
		figures = append(figures, scaleFigures(row, ttl, full, baton, bare, plain)...)
		fmt.Printf("batonbench: scale %v: took %v\n", row, time.Since(began).Round(time.Second))
	}

	fmt.Println("\nbatonbench: scale: the curve (every queue led after start)")
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "queues x workers\tBaton\tbare concurrency.Election\tBaton / bare\tre-led after cut (Baton / bare)\tsessions lost\ttwo leaders")
	for _, p := range curve {
		cell := func(r scaleResult, d time.Duration) string {
			switch {
			case r.notLed > 0 && d == r.allLed:
				return fmt.Sprintf("%d not led after %v", r.notLed, scaleWait)
			case d == 0 && r.failed != "":
				return "failed"
			case d == 0:
				return "-"
			}
			return d.Round(10 * time.Millisecond).String()
		}
		ratio := "-"
		if p.baton.allLed > 0 && p.bare.allLed > 0 && p.baton.failed == "" {
			ratio = fmt.Sprintf("%.1fx", float64(p.baton.allLed)/float64(p.bare.allLed))
		}
		fmt.Fprintf(tw, "%d x %d\t%s\t%s\t%s\t%s / %s\t%d\t%d\n", p.row.queues, p.row.workers,
			cell(p.baton, p.baton.allLed), cell(p.bare, p.bare.allLed), ratio,
			cell(p.baton, p.baton.relead), cell(p.bare, p.bare.relead), p.baton.lost, p.baton.overlp)
	}
	tw.Flush()
	fmt.Println()

	procRow := rows[0]
	if o.scale10k {
		procRow = rows[len(rows)-1]
	}
	pf, err := benchScaleProcs(ctx, s.cluster, o, procRow)
	if err != nil {
		return nil, fmt.Errorf("worker processes: %w", err)
	}
	return append(figures, pf...), nil
}

func scaleFigures(row scaleRow, ttl time.Duration, full bool, baton, bare, plain scaleResult) (figs []benchreport.Figure) {
	n, one, ms := "scale "+row.String(), benchreport.Single, benchreport.Ms
	const bareName, plainName = "bare concurrency.Election", "Baton without balancing"
	fair := float64((row.queues + row.workers - 1) / row.workers)
	most := func(c []int) float64 {
		if len(c) == 0 {
			return 0
		}
		return float64(slices.Max(c)) / fair
	}
	// A failed measurement reads as -1, never as a fast one.
	val := func(r scaleResult, d time.Duration) float64 {
		if d == 0 && r.failed != "" {
			return -1
		}
		return ms(d)
	}
	fmt.Printf("batonbench: scale %v: leadership after start-up %v (still: %v), after a rolling restart %v (still: %v), fair share %.0f; without balancing %v, %v\n",
		row, baton.countsStart, baton.startOK, baton.countsRolled, baton.rolledOK, fair, plain.countsStart, plain.countsRolled)
	if baton.overlap != "" {
		fmt.Printf("batonbench: scale %v: TWO LEADERS: %s\n", row, baton.overlap)
	}
	ledMs, bareMs := val(baton, baton.allLed), val(bare, bare.allLed)
	figs = []benchreport.Figure{
		one(n+": every queue led after start", "ms", ledMs, bareName, bareMs,
			"<= 10000 ms and <= 3 x bare", ledMs >= 0 && ledMs <= 10000 && bareMs > 0 && ledMs <= 3*bareMs),
		// All led at one instant waits for the balancer's moves to calm down (each move leaves its
		// queue without a leader for milliseconds); this one is the herd alone.
		one(n+": every queue had a leader after start (not all at one instant)", "ms", val(baton, baton.everyFirst), bareName,
			val(bare, bare.everyFirst), "informative", true),
	}
	// Safety and session losses are reported whatever else failed.
	defer func() {
		figs = append(figs,
			one(n+": sessions lost for want of CPU", "sessions", float64(baton.lost), plainName, float64(plain.lost),
				"0", baton.lost == 0),
			one(fmt.Sprintf("%s: queues with two leaders at once (of %d terms)", n, baton.terms), "queues", float64(baton.overlp),
				plainName, float64(plain.overlp), "0", baton.overlp == 0 && baton.terms > 0))
	}()
	if baton.notLed > 0 {
		return figs // nothing after start-up was measured
	}
	restNote := ""
	if !baton.restOK {
		restNote = " (counts never still)"
	}
	figs = append(figs,
		one(n+": etcd requests per second at rest"+restNote, "req/s", baton.reqPerSec, bareName, bare.reqPerSec,
			fmt.Sprintf("<= 3 per worker (%d), whatever the queues", 3*row.workers), baton.restOK && baton.reqPerSec <= float64(3*row.workers)),
		one(n+": goroutines per 1,000 elections", "goroutines", baton.goroutines, bareName, bare.goroutines,
			"<= 3,000", baton.goroutines <= 3000),
		one(n+": RSS per 1,000 elections, in-process fleet (etcd included)", "MiB", baton.rssMiB, bareName, bare.rssMiB,
			"informative (per process: below)", true),
	)
	if !full {
		return figs
	}
	reledMs := val(baton, baton.relead)
	figs = append(figs,
		one(n+": all led again after the top leader is cut off", "ms", reledMs, bareName, val(bare, bare.relead),
			fmt.Sprintf("<= TTL + 2 s (%.0f ms)", ms(ttl)+2000), reledMs >= 0 && reledMs <= ms(ttl)+2000),
		one(n+": most queues led by one worker after start-up / fair share", "x", most(baton.countsStart),
			plainName, most(plain.countsStart), "<= 2, counts still", baton.startOK && most(baton.countsStart) <= 2),
		one(n+": most queues led by one worker after a rolling restart / fair share", "x", most(baton.countsRolled),
			plainName, most(plain.countsRolled), "<= 1.25, counts still", baton.rolledOK && most(baton.countsRolled) <= 1.25),
	)
	return figs
}

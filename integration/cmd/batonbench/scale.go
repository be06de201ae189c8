package main

import (
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
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/testkit"
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

// sessionLostMessage is the warning election logs when a session (and every term on it) is lost; the
// section counts these, because the Elector has no metric of its own for it.
const sessionLostMessage = "election session lost"

// lossCounter is a zap core that counts the elector's session-loss warnings and drops everything else.
type lossCounter struct{ n *atomic.Int64 }

func newLossCounter() lossCounter { return lossCounter{n: new(atomic.Int64)} }

func (c lossCounter) logger() *zap.Logger                        { return zap.New(c) }
func (c lossCounter) Enabled(l zapcore.Level) bool               { return l >= zapcore.WarnLevel }
func (c lossCounter) With([]zapcore.Field) zapcore.Core          { return c }
func (c lossCounter) Write(zapcore.Entry, []zapcore.Field) error { c.n.Add(1); return nil }
func (c lossCounter) Sync() error                                { return nil }
func (c lossCounter) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if e.Message == sessionLostMessage && c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

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

func scaleQueueNames(n int) []string {
	qs := make([]string, n)
	for i := range qs {
		qs[i] = fmt.Sprintf("q%05d", i)
	}
	return qs
}

// A fleet is in-process workers campaigning for the same queues, each with its own etcd client behind
// its own proxy (so one can be cut off as a crash would), either through Baton (election + balance) or
// through bare concurrency.Election. Another section can reuse it: set the fields, then start workers
// with a workerSpec (its version, a term hook of its own).
type fleet struct {
	cluster *etcdtest.Cluster
	project string
	queues  []string
	ttl     time.Duration // 0: election's default
	bare    bool
	balance bool
	lost    atomic.Int64         // session losses of the Baton workers that were not cut off, once closed
	meters  metric.MeterProvider // the balancers' metrics; nil: none

	led     atomic.Int64 // queues whose current leader's term is live, as the workers see it
	workers []*fleetWorker

	mu    sync.Mutex
	terms map[string][][2]time.Time // per queue, every ended Baton term as [start, end] (monotonic clock)
}

type fleetWorker struct {
	id      string
	proxy   *etcdtest.Proxy
	cli     *clientv3.Client
	el      *election.Elector
	stop    context.CancelFunc
	wg      sync.WaitGroup
	leading atomic.Int64
	losses  lossCounter // its elector's session losses
	cut     bool        // cut off on purpose: its session loss is the point, not a want of CPU
}

// workerSpec is what differs between the workers of a fleet.
type workerSpec struct {
	id, version string
	// onTerm, when set, is called as a Baton term starts; the func it returns is called once it ended.
	onTerm func(*election.Term) func()
}

func (f *fleet) start(ctx context.Context, spec workerSpec) (*fleetWorker, error) {
	proxy, err := etcdtest.NewProxy(f.cluster.Endpoints()[0])
	if err != nil {
		return nil, err
	}
	cli, err := f.cluster.NewClient(proxy.URL())
	if err != nil {
		proxy.Close()
		return nil, err
	}
	w := &fleetWorker{id: spec.id, proxy: proxy, cli: cli, losses: newLossCounter()}
	wctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	lead := func(tctx context.Context) {
		w.leading.Add(1)
		f.led.Add(1)
		<-tctx.Done()
		f.led.Add(-1)
		w.leading.Add(-1)
	}
	if f.bare {
		ttl := f.ttl
		if ttl == 0 {
			ttl = election.DefaultConfig().TTL
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(ttl/time.Second)))
		if err != nil {
			w.release()
			return nil, err
		}
		for _, q := range f.queues {
			w.wg.Go(func() {
				e := concurrency.NewElection(s, "/bench-bare/"+f.project+"/"+q)
				if err := e.Campaign(wctx, spec.id); err != nil {
					return
				}
				tctx, c := context.WithCancel(wctx)
				stop := context.AfterFunc(s.Ctx(), c)
				lead(tctx)
				stop()
				c()
			})
		}
		w.wg.Go(func() { <-wctx.Done(); s.Orphan() })
	} else {
		el, err := election.New(cli, election.Config{TTL: f.ttl, Logger: w.losses.logger()})
		if err != nil {
			w.release()
			return nil, err
		}
		w.el = el
		runner, err := balance.New(el, cli, balance.Config{Project: f.project, ServerID: spec.id, Version: spec.version,
			Queues: f.queues, Disabled: !f.balance, MeterProvider: f.meters})
		if err != nil {
			w.release()
			return nil, err
		}
		w.wg.Go(func() {
			_ = runner.Run(wctx, func(string) election.Callbacks {
				return election.Callbacks{OnElected: func(tctx context.Context, term *election.Term) error {
					var ended func()
					if spec.onTerm != nil {
						ended = spec.onTerm(term)
					}
					lead(tctx)
					if end, ok := term.Ended(); ok {
						f.mu.Lock()
						if f.terms == nil {
							f.terms = map[string][][2]time.Time{}
						}
						f.terms[term.Queue()] = append(f.terms[term.Queue()], [2]time.Time{term.Started(), end})
						f.mu.Unlock()
					}
					if ended != nil {
						ended()
					}
					return nil
				}}
			})
		})
	}
	f.workers = append(f.workers, w)
	return w, nil
}

// close stops a worker gracefully (Baton resigns every term) and releases it.
func (w *fleetWorker) close(ctx context.Context) {
	w.stop()
	w.wg.Wait()
	if w.el != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = w.el.Close(cctx)
		cancel()
	}
	w.release()
}

func (w *fleetWorker) release() {
	w.cli.Close()
	w.proxy.Close()
}

func (f *fleet) closeAll(ctx context.Context) {
	for _, w := range f.workers {
		f.close(ctx, w)
	}
	f.workers = nil
}

// close closes w and counts its session losses unless it was cut off on purpose.
func (f *fleet) close(ctx context.Context, w *fleetWorker) {
	w.close(ctx)
	if !w.cut {
		f.lost.Add(w.losses.n.Load())
	}
}

// overlaps counts the queues where a term started before its predecessor's ended (two leaders at
// once), the check integration/balance makes; the first is described.
func (f *fleet) overlaps() (int, string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, first := 0, ""
	for q, terms := range f.terms {
		sorted := slices.Clone(terms)
		slices.SortFunc(sorted, func(a, b [2]time.Time) int { return a[0].Compare(b[0]) })
		for i := 1; i < len(sorted); i++ {
			if sorted[i][0].Before(sorted[i-1][1]) {
				if n == 0 {
					first = fmt.Sprintf("queue %s: a term started %v before its predecessor's ended", q, sorted[i-1][1].Sub(sorted[i][0]))
				}
				n++
				break
			}
		}
	}
	return n, first
}

func (f *fleet) termCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, t := range f.terms {
		n += len(t)
	}
	return n
}

// waitAllLed waits until every queue is led; it returns how long that took since since.
func (f *fleet) waitAllLed(ctx context.Context, since time.Time, timeout time.Duration) (time.Duration, error) {
	err := testkit.Poll(ctx, timeout, 2*time.Millisecond, func() error {
		if n := f.led.Load(); n < int64(len(f.queues)) {
			return fmt.Errorf("%d of %d queues led", n, len(f.queues))
		}
		return nil
	})
	return time.Since(since), err
}

func (f *fleet) counts(live []*fleetWorker) []int {
	counts := make([]int, len(live))
	for i, w := range live {
		counts[i] = int(w.leading.Load())
	}
	return counts
}

// settle waits until every queue is led and the leadership counts have not changed for still, and
// returns them; ok is false when that did not happen within timeout (the counts are the last seen).
func (f *fleet) settle(ctx context.Context, live []*fleetWorker, still, timeout time.Duration) (counts []int, ok bool) {
	deadline := time.Now().Add(timeout)
	var last []int
	stableSince := time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		counts := f.counts(live)
		if !slices.Equal(counts, last) || f.led.Load() < int64(len(f.queues)) {
			last, stableSince = counts, time.Now()
		} else if time.Since(stableSince) >= still {
			return last, true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return last, false
}

// atRest measures the etcd requests per second over a window of d in which the leadership counts did
// not change, trying again (within the bound) while they do; ok is false when no window was still, and
// the figure is then the last window's.
func (f *fleet) atRest(ctx context.Context, d, within time.Duration) (perSec float64, methods string, ok bool) {
	deadline := time.Now().Add(within)
	for {
		before := f.counts(f.workers)
		m0, by0 := etcdMessages()
		select {
		case <-ctx.Done():
			return 0, "", false
		case <-time.After(d):
		}
		m1, by1 := etcdMessages()
		var parts []string
		for k, v := range by1 {
			if dv := v - by0[k]; dv > 0 {
				parts = append(parts, fmt.Sprintf("%s %.1f/s", k, dv/d.Seconds()))
			}
		}
		slices.Sort(parts)
		perSec, methods = (m1-m0)/d.Seconds(), strings.Join(parts, ", ")
		if slices.Equal(before, f.counts(f.workers)) && f.led.Load() == int64(len(f.queues)) {
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

func runFleet(ctx context.Context, cluster *etcdtest.Cluster, o options, row scaleRow, m fleetMode) (r scaleResult, err error) {
	name, kind := "Baton", "baton"
	switch {
	case m.bare:
		name, kind = "bare", "bare"
	case !m.balance:
		name, kind = "Baton without balancing", "plain"
	}
	// A project per fleet: keys a fleet leaves behind (a cut worker's, until its lease expires) are
	// never another fleet's candidates.
	f := &fleet{cluster: cluster, project: fmt.Sprintf("%s-%v-%s", scaleProject, row, kind), queues: scaleQueueNames(row.queues),
		ttl: o.scaleTTL, bare: m.bare, balance: m.balance}
	defer func() {
		f.closeAll(ctx)
		r.lost = int(f.lost.Load())
		r.terms = f.termCount()
		r.overlp, r.overlap = f.overlaps()
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
		if _, err := f.start(ctx, workerSpec{id: fmt.Sprintf("w%d", i)}); err != nil {
			stopProfile()
			return r, err
		}
	}
	r.allLed, err = f.waitAllLed(ctx, start, scaleWait)
	stopProfile()
	took("all led")
	if err != nil {
		r.notLed = len(f.queues) - int(f.led.Load())
		r.failed = fmt.Sprintf("not every queue led within %v of start: %v", scaleWait, err)
		return r, ctx.Err()
	}
	r.countsStart, r.startOK = f.settle(ctx, f.workers, still, scaleSettleWithin)
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
		if err := testkit.Poll(ctx, scaleWait, time.Millisecond, func() error {
			if f.led.Load() == int64(len(f.queues)) {
				return fmt.Errorf("the cut worker still leads")
			}
			return nil
		}); err != nil {
			r.failed = fmt.Sprintf("the cut worker's terms did not end within %v", scaleWait)
			return r, ctx.Err()
		}
		if r.relead, err = f.waitAllLed(ctx, cut, scaleWait); err != nil {
			r.failed = fmt.Sprintf("not every queue led again within %v of the cut: %v", scaleWait, err)
			return r, ctx.Err()
		}
		took("cut and re-led")
	}
	if m.roll {
		// Rolling restart of every worker, a cut one included: each stops (resigning its terms), a new
		// one starts, and the next goes once every queue is led.
		live := make([]*fleetWorker, 0, len(f.workers))
		for i, w := range f.workers {
			f.close(ctx, w)
			nw, err := f.start(ctx, workerSpec{id: fmt.Sprintf("w%d-r", i)})
			if err != nil {
				return r, err
			}
			live = append(live, nw)
			if _, err := f.waitAllLed(ctx, time.Now(), scaleWait); err != nil {
				f.workers = append(live, f.workers[i+1:]...)
				r.failed = fmt.Sprintf("not every queue led within %v during the rolling restart: %v", scaleWait, err)
				return r, ctx.Err()
			}
		}
		f.workers = live
		took("rolling restart")
		r.countsRolled, r.rolledOK = f.settle(ctx, live, still, scaleSettleWithin)
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
		for _, name := range []string{"mutex", "block", "goroutine"} {
			if f, err := os.Create(filepath.Join(dir, name+".pprof")); err == nil {
				_ = pprof.Lookup(name).WriteTo(f, 0)
				f.Close()
			}
		}
		runtime.SetMutexProfileFraction(0)
		runtime.SetBlockProfileRate(0)
	}, nil
}

// etcdMessages sums the gRPC messages the in-process etcd servers received (their own metrics).
func etcdMessages() (float64, map[string]float64) {
	by := map[string]float64{}
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		return 0, by
	}
	var total float64
	for _, mf := range mfs {
		if mf.GetName() != "grpc_server_msg_received_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			total += m.GetCounter().GetValue()
			for _, l := range m.GetLabel() {
				if l.GetName() == "grpc_method" {
					by[l.GetValue()] += m.GetCounter().GetValue()
				}
			}
		}
	}
	return total, by
}

// procMiB reads a "<n> kB" line (VmRSS, VmHWM) of a /proc status file, in MiB.
func procMiB(path, key string) float64 {
	kb, _ := strconv.ParseFloat(strings.TrimSuffix(benchreport.ProcValue(path, key), " kB"), 64)
	return kb / 1024
}

// scaleTTL is the lease TTL the section's workers run with.
func scaleTTL(o options) time.Duration {
	if o.scaleTTL != 0 {
		return o.scaleTTL
	}
	return election.DefaultConfig().TTL
}

// benchScale measures every row of the curve, then memory per worker process.
func benchScale(ctx context.Context, cluster *etcdtest.Cluster, o options) ([]benchreport.Figure, error) {
	rows, err := parseScaleRows(o.scaleRows)
	if err != nil {
		return nil, err
	}
	ttl := scaleTTL(o)
	fmt.Printf("batonbench: scale: rows %v, TTL %v\n", rows, ttl)
	var figures []benchreport.Figure
	type curvePoint struct {
		row         scaleRow
		baton, bare scaleResult
		took        time.Duration
	}
	var curve []curvePoint
	for i, row := range rows {
		// The first row (every row with -scale-10k) measures everything; the others are points of the
		// curve (start-up, rest, safety), which keeps the default bench within its budget.
		full := i == 0 || o.scale10k
		began := time.Now()
		baton, err := runFleet(ctx, cluster, o, row, fleetMode{balance: true, rest: true, cut: full, roll: full})
		if err != nil {
			return nil, fmt.Errorf("%v baton: %w", row, err)
		}
		bare, err := runFleet(ctx, cluster, o, row, fleetMode{bare: true, rest: true, cut: full})
		if err != nil {
			return nil, fmt.Errorf("%v bare: %w", row, err)
		}
		var plain scaleResult
		if full {
			if plain, err = runFleet(ctx, cluster, o, row, fleetMode{roll: true}); err != nil {
				return nil, fmt.Errorf("%v without balancing: %w", row, err)
			}
		}
		curve = append(curve, curvePoint{row, baton, bare, time.Since(began)})
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
	pf, err := benchScaleProcs(ctx, cluster, o, procRow)
	if err != nil {
		return nil, fmt.Errorf("worker processes: %w", err)
	}
	return append(figures, pf...), nil
}

func one(name, unit string, v float64, base string, bv float64, target string, met bool) benchreport.Figure {
	return benchreport.Figure{Name: name, Unit: unit, Samples: 1, P50: v, P95: v, P99: v, Baseline: base,
		BaselineP50: bv, BaselineP95: bv, Target: target, Met: met}
}

func scaleFigures(row scaleRow, ttl time.Duration, full bool, baton, bare, plain scaleResult) (figs []benchreport.Figure) {
	n := "scale " + row.String()
	ms := benchreport.Ms
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

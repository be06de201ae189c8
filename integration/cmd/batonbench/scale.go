package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/testkit"
)

// A fleet is N in-process workers campaigning for the same Q queues, each with its own etcd client
// behind its own proxy (so one can be cut off as a crash would), either through Baton (election +
// balance) or through bare concurrency.Election.
type fleet struct {
	cluster *etcdtest.Cluster
	queues  []string
	ttl     time.Duration
	bare    bool
	balance bool

	led     atomic.Int64 // queues whose current leader's term is live, as the workers see it
	workers []*fleetWorker
}

type fleetWorker struct {
	proxy   *etcdtest.Proxy
	cli     *clientv3.Client
	el      *election.Elector
	stop    context.CancelFunc
	wg      sync.WaitGroup
	leading atomic.Int64
}

func (f *fleet) start(ctx context.Context, id string) (*fleetWorker, error) {
	proxy, err := etcdtest.NewProxy(f.cluster.Endpoints()[0])
	if err != nil {
		return nil, err
	}
	cli, err := f.cluster.NewClient(proxy.URL())
	if err != nil {
		proxy.Close()
		return nil, err
	}
	w := &fleetWorker{proxy: proxy, cli: cli}
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
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(f.ttl/time.Second)))
		if err != nil {
			return nil, err
		}
		for _, q := range f.queues {
			w.wg.Go(func() {
				e := concurrency.NewElection(s, "/bench-bare/"+q)
				if err := e.Campaign(wctx, id); err != nil {
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
		el, err := election.New(cli, election.Config{TTL: f.ttl})
		if err != nil {
			return nil, err
		}
		w.el = el
		runner, err := balance.New(el, cli, balance.Config{Project: "scale", ServerID: id, Queues: f.queues, Disabled: !f.balance})
		if err != nil {
			return nil, err
		}
		w.wg.Go(func() {
			_ = runner.Run(wctx, func(string) election.Callbacks {
				return election.Callbacks{OnElected: func(tctx context.Context, _ *election.Term) error { lead(tctx); return nil }}
			})
		})
	}
	f.workers = append(f.workers, w)
	return w, nil
}

// close stops a worker gracefully (Baton resigns every term) and releases it.
func (w *fleetWorker) close() {
	w.stop()
	w.wg.Wait()
	if w.el != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_ = w.el.Close(ctx)
		cancel()
	}
	w.cli.Close()
	w.proxy.Close()
}

func (f *fleet) closeAll() {
	for _, w := range f.workers {
		w.close()
	}
	f.workers = nil
}

// waitAllLed waits until every queue is led; it returns how long that took.
func (f *fleet) waitAllLed(ctx context.Context, since time.Time, timeout time.Duration) (time.Duration, error) {
	err := testkit.Poll(ctx, timeout, 2*time.Millisecond, func() error {
		if n := f.led.Load(); n < int64(len(f.queues)) {
			return fmt.Errorf("%d of %d queues led", n, len(f.queues))
		}
		return nil
	})
	return time.Since(since), err
}

// settle waits until the leadership counts stop changing for a second, and returns the largest.
func (f *fleet) settle(ctx context.Context, live []*fleetWorker, timeout time.Duration) (int, []int) {
	deadline := time.Now().Add(timeout)
	var last []int
	stableSince := time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		counts := make([]int, len(live))
		for i, w := range live {
			counts[i] = int(w.leading.Load())
		}
		if fmt.Sprint(counts) != fmt.Sprint(last) || f.led.Load() < int64(len(f.queues)) {
			last, stableSince = counts, time.Now()
		} else if time.Since(stableSince) > time.Second {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	most := 0
	for _, c := range last {
		most = max(most, c)
	}
	return most, last
}

type scaleResult struct {
	allLed, relead      time.Duration
	reqPerSec           float64
	goroutines, rssMiB  float64 // per 1,000 elections
	maxStart, maxRolled int
	countsStart         []int
	countsRolled        []int
}

func runFleet(ctx context.Context, cluster *etcdtest.Cluster, o options, bare, bal bool) (scaleResult, error) {
	var r scaleResult
	f := &fleet{cluster: cluster, ttl: o.scaleTTL, bare: bare, balance: bal}
	for i := range o.scaleQueues {
		f.queues = append(f.queues, fmt.Sprintf("q%04d", i))
	}
	defer f.closeAll()
	debug.FreeOSMemory() // RSS deltas are otherwise blurred by what the previous fleet left to the GC
	g0, rss0 := runtime.NumGoroutine(), rssMiB()
	stopProfile := func() {}
	if o.scaleProfile != "" && !bare && bal {
		var err error
		if stopProfile, err = startProfiles(o.scaleProfile); err != nil {
			return r, err
		}
	}
	start := time.Now()
	for i := range o.scaleWorkers {
		if _, err := f.start(ctx, fmt.Sprintf("w%d", i)); err != nil {
			return r, err
		}
	}
	var err error
	r.allLed, err = f.waitAllLed(ctx, start, 2*time.Minute)
	stopProfile()
	if err != nil {
		return r, err
	}
	r.maxStart, r.countsStart = f.settle(ctx, f.workers, time.Minute)
	elections := float64(o.scaleWorkers*o.scaleQueues) / 1000
	debug.FreeOSMemory()
	r.goroutines = float64(runtime.NumGoroutine()-g0) / elections
	r.rssMiB = (rssMiB() - rss0) / elections

	// At rest: every request etcd receives, over a few seconds.
	m0, by0 := etcdMessages()
	time.Sleep(o.scaleRest)
	m1, by1 := etcdMessages()
	r.reqPerSec = (m1 - m0) / o.scaleRest.Seconds()
	var methods []string
	for k, v := range by1 {
		if d := v - by0[k]; d > 0 {
			methods = append(methods, fmt.Sprintf("%s %.1f/s", k, d/o.scaleRest.Seconds()))
		}
	}
	fmt.Printf("batonbench: scale (bare %v, balance %v): etcd at rest: %s\n", bare, bal, strings.Join(methods, ", "))

	// Cut off the worker that leads most, as a crash would; the others take its queues.
	var victim *fleetWorker
	for _, w := range f.workers {
		if victim == nil || w.leading.Load() > victim.leading.Load() {
			victim = w
		}
	}
	cut := time.Now()
	victim.proxy.Blackhole()
	for f.led.Load() == int64(len(f.queues)) && time.Since(cut) < o.scaleTTL*2 {
		time.Sleep(time.Millisecond) // its watchdog ends its terms first
	}
	if r.relead, err = f.waitAllLed(ctx, cut, 2*time.Minute); err != nil {
		return r, err
	}
	if bare {
		return r, nil
	}
	// Rolling restart of every worker, the cut one included.
	live := make([]*fleetWorker, 0, len(f.workers))
	for i, w := range f.workers {
		w.close()
		nw, err := f.start(ctx, fmt.Sprintf("w%d-r", i))
		if err != nil {
			return r, err
		}
		live = append(live, nw)
		if _, err := f.waitAllLed(ctx, time.Now(), 2*time.Minute); err != nil {
			return r, err
		}
	}
	f.workers = live
	r.maxRolled, r.countsRolled = f.settle(ctx, live, time.Minute)
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

func rssMiB() float64 {
	kb, _ := strconv.ParseFloat(strings.TrimSuffix(benchreport.ProcValue("/proc/self/status", "VmRSS"), " kB"), 64)
	return kb / 1024
}

// benchScale measures o.scaleWorkers workers over o.scaleQueues queues on one etcd, through Baton
// (with balancing) beside bare concurrency.Election in the same run, and Baton without balancing for
// the leadership spread.
func benchScale(ctx context.Context, cluster *etcdtest.Cluster, o options) ([]benchreport.Figure, error) {
	fmt.Printf("batonbench: scale: %d queues x %d workers, TTL %v\n", o.scaleQueues, o.scaleWorkers, o.scaleTTL)
	baton, err := runFleet(ctx, cluster, o, false, true)
	if err != nil {
		return nil, fmt.Errorf("baton: %w", err)
	}
	bare, err := runFleet(ctx, cluster, o, true, false)
	if err != nil {
		return nil, fmt.Errorf("bare: %w", err)
	}
	plain, err := runFleet(ctx, cluster, o, false, false)
	if err != nil {
		return nil, fmt.Errorf("without balancing: %w", err)
	}
	fair := float64((o.scaleQueues + o.scaleWorkers - 1) / o.scaleWorkers)
	fmt.Printf("batonbench: scale: leadership after start-up %v, after a rolling restart %v (fair share %.0f); without balancing %v, %v\n",
		baton.countsStart, baton.countsRolled, fair, plain.countsStart, plain.countsRolled)
	n := fmt.Sprintf("%dx%d", o.scaleQueues, o.scaleWorkers)
	one := func(name, unit string, v float64, base string, bv float64, target string, met bool) benchreport.Figure {
		return benchreport.Figure{Name: name, Unit: unit, Samples: 1, P50: v, P95: v, P99: v, Baseline: base,
			BaselineP50: bv, BaselineP95: bv, Target: target, Met: met}
	}
	ms := benchreport.Ms
	ttlMs := ms(o.scaleTTL)
	return []benchreport.Figure{
		one("scale "+n+": every queue led after start", "ms", ms(baton.allLed), "bare concurrency.Election", ms(bare.allLed),
			"<= 10000 ms", ms(baton.allLed) <= 10000),
		one("scale "+n+": all led again after the top leader is cut off", "ms", ms(baton.relead), "bare concurrency.Election", ms(bare.relead),
			fmt.Sprintf("<= TTL + 5 s (%.0f ms)", ttlMs+5000), ms(baton.relead) <= ttlMs+5000),
		one("scale "+n+": etcd requests per second at rest", "req/s", baton.reqPerSec, "bare concurrency.Election", bare.reqPerSec,
			fmt.Sprintf("<= 3 per worker (%d), whatever the queues", 3*o.scaleWorkers), baton.reqPerSec <= float64(3*o.scaleWorkers)),
		one("scale "+n+": goroutines per 1,000 elections", "goroutines", baton.goroutines, "bare concurrency.Election", bare.goroutines,
			"<= 3,000", baton.goroutines <= 3000),
		one("scale "+n+": RSS per 1,000 elections (server included)", "MiB", baton.rssMiB, "bare concurrency.Election", bare.rssMiB,
			"<= 64 MiB", baton.rssMiB <= 64),
		one("scale "+n+": most queues led by one worker after start-up / fair share", "x", float64(baton.maxStart)/fair,
			"Baton without balancing", float64(plain.maxStart)/fair, "<= 2", float64(baton.maxStart) <= 2*fair),
		one("scale "+n+": most queues led by one worker after a rolling restart / fair share", "x", float64(baton.maxRolled)/fair,
			"Baton without balancing", float64(plain.maxRolled)/fair, "<= 2", float64(baton.maxRolled) <= 2*fair),
	}, nil
}

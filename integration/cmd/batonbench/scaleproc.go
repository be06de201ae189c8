package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/testkit"
)

// Memory per worker process: each worker of the fleet is this binary re-executed in worker mode
// (scaleWorkerMode), a process of its own as in production, reporting on stdout its own VmRSS and
// VmHWM, how many queues it leads, its session losses and every term it held. Leadership itself is
// read from etcd (election.Elector.Leaders), not from what the workers say.

// scaleWorkerMode is the first argument that makes batonbench a scale worker; it is not a flag, so it
// stays out of -help.
const scaleWorkerMode = "scale-worker"

// The worker's stdout lines.
const (
	statLine = "stat" // stat <leading> <VmRSS MiB> <VmHWM MiB> <sessions lost>
	termLine = "term" // term <queue> <start> <end>: a term it held, Unix nanoseconds (wall clock)
)

// scaleWorker runs one worker until its stdin closes (the parent's signal to stop gracefully, and what
// happens when the parent dies), then resigns, prints a last stat line and returns.
func scaleWorker(args []string) error {
	fs := flag.NewFlagSet(scaleWorkerMode, flag.ContinueOnError)
	endpoint := fs.String("endpoint", "", "etcd endpoint")
	id := fs.String("id", "", "server ID")
	project := fs.String("project", scaleProject, "project")
	queues := fs.Int("queues", 0, "queues q00000..")
	ttl := fs.Duration("ttl", 0, "lease TTL; 0 is election's default")
	bare := fs.Bool("bare", false, "bare concurrency.Election instead of Baton")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || *id == "" || *queues < 1 {
		return fmt.Errorf("%s: -endpoint, -id and -queues (>= 1) are required", scaleWorkerMode)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()

	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{*endpoint}, DialTimeout: 5 * time.Second,
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()

	var (
		out     sync.Mutex
		leading atomic.Int64
		wg      sync.WaitGroup
	)
	losses := newLossCounter()
	printf := func(format string, a ...any) {
		out.Lock()
		fmt.Printf(format, a...)
		out.Unlock()
	}
	stat := func() {
		printf("%s %d %.1f %.1f %d\n", statLine, leading.Load(), procMiB("/proc/self/status", "VmRSS"),
			procMiB("/proc/self/status", "VmHWM"), losses.n.Load())
	}
	var el *election.Elector
	if *bare {
		t := *ttl
		if t == 0 {
			t = election.DefaultConfig().TTL
		}
		s, err := concurrency.NewSession(cli, concurrency.WithTTL(int(t/time.Second)))
		if err != nil {
			return err
		}
		for _, q := range scaleQueueNames(*queues) {
			wg.Go(func() {
				e := concurrency.NewElection(s, "/bench-bare/"+*project+"/"+q)
				if e.Campaign(ctx, *id) != nil {
					return
				}
				leading.Add(1)
				select {
				case <-ctx.Done():
				case <-s.Done():
				}
				leading.Add(-1)
			})
		}
		defer s.Close()
	} else {
		if el, err = election.New(cli, election.Config{TTL: *ttl, Logger: losses.logger()}); err != nil {
			return err
		}
		r, err := balance.New(el, cli, balance.Config{Project: *project, ServerID: *id, Queues: scaleQueueNames(*queues)})
		if err != nil {
			return err
		}
		wg.Go(func() {
			_ = r.Run(ctx, func(q string) election.Callbacks {
				return election.Callbacks{OnElected: func(tctx context.Context, term *election.Term) error {
					leading.Add(1)
					<-tctx.Done()
					leading.Add(-1)
					if end, ok := term.Ended(); ok {
						printf("%s %s %d %d\n", termLine, q, term.Started().UnixNano(), end.UnixNano())
					}
					return nil
				}}
			})
		})
	}
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		stat()
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	wg.Wait()
	if el != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		_ = el.Close(cctx)
		cancel()
	}
	stat()
	return nil
}

// procWorker is the parent's view of one worker process.
type procWorker struct {
	id    string
	cmd   *exec.Cmd
	stdin io.WriteCloser
	read  sync.WaitGroup // the stdout reader

	mu    sync.Mutex
	stat  procStat
	stats int
	terms map[string][][2]int64
}

type procStat struct {
	leading      int
	rss, hwm     float64 // MiB
	sessionsLost int
}

func startProcWorker(ctx context.Context, id, endpoint, project string, queues int, ttl time.Duration, bare bool) (*procWorker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, scaleWorkerMode, "-endpoint", endpoint, "-id", id, "-project", project,
		"-queues", strconv.Itoa(queues), "-ttl", ttl.String(), "-bare="+strconv.FormatBool(bare))
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 15 * time.Second
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	w := &procWorker{id: id, cmd: cmd, stdin: stdin, terms: map[string][][2]int64{}}
	w.read.Go(func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			w.parse(sc.Text())
		}
	})
	return w, nil
}

func (w *procWorker) parse(line string) {
	f := strings.Fields(line)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case len(f) == 5 && f[0] == statLine:
		var s procStat
		s.leading, _ = strconv.Atoi(f[1])
		s.rss, _ = strconv.ParseFloat(f[2], 64)
		s.hwm, _ = strconv.ParseFloat(f[3], 64)
		s.sessionsLost, _ = strconv.Atoi(f[4])
		w.stat = s
		w.stats++
	case len(f) == 4 && f[0] == termLine:
		start, _ := strconv.ParseInt(f[2], 10, 64)
		end, _ := strconv.ParseInt(f[3], 10, 64)
		w.terms[f[1]] = append(w.terms[f[1]], [2]int64{start, end})
	}
}

func (w *procWorker) last() (procStat, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stat, w.stats
}

// stop closes the worker's stdin (it resigns and exits) and waits for it.
func (w *procWorker) stop() error {
	_ = w.stdin.Close()
	w.read.Wait()
	return w.cmd.Wait()
}

// procFleet is the child-process fleet of one row.
type procFleet struct {
	workers []*procWorker
}

func (f *procFleet) stopAll() error {
	var first error
	for _, w := range f.workers {
		if err := w.stop(); err != nil && first == nil {
			first = fmt.Errorf("worker %s: %w", w.id, err)
		}
	}
	return first
}

// fresh waits for a stat line from every worker printed after this call, and returns them.
func (f *procFleet) fresh(ctx context.Context) ([]procStat, error) {
	seen := make([]int, len(f.workers))
	for i, w := range f.workers {
		_, seen[i] = w.last()
	}
	stats := make([]procStat, len(f.workers))
	err := testkit.Poll(ctx, 30*time.Second, 50*time.Millisecond, func() error {
		for i, w := range f.workers {
			s, n := w.last()
			if n <= seen[i] {
				return fmt.Errorf("no new stat line from worker %s", w.id)
			}
			stats[i] = s
		}
		return nil
	})
	return stats, err
}

// overlaps is fleet.overlaps across the processes, on the wall clock they share.
func (f *procFleet) overlaps() (int, int, string) {
	all := map[string][][2]int64{}
	for _, w := range f.workers {
		w.mu.Lock()
		for q, ts := range w.terms {
			all[q] = append(all[q], ts...)
		}
		w.mu.Unlock()
	}
	n, terms, first := 0, 0, ""
	for q, ts := range all {
		terms += len(ts)
		slices.SortFunc(ts, func(a, b [2]int64) int { return int(a[0] - b[0]) })
		for i := 1; i < len(ts); i++ {
			if ts[i][0] < ts[i-1][1] {
				if n == 0 {
					first = fmt.Sprintf("queue %s: a term started %v before its predecessor's ended", q, time.Duration(ts[i-1][1]-ts[i][0]))
				}
				n++
				break
			}
		}
	}
	return n, terms, first
}

type procResult struct {
	allLed             time.Duration
	counts             []int
	still              bool
	maxHWM, maxRSS     float64
	sessionsLost       int
	overlaps, terms    int
	overlap, failed    string
	processes, elected int
}

// runProcFleet starts row.workers worker processes and measures them; leadership is read from etcd for
// Baton and from the workers' stat lines for bare (its keys are concurrency's, not Baton's).
func runProcFleet(ctx context.Context, cluster *etcdtest.Cluster, o options, row scaleRow, bare bool) (r procResult, err error) {
	kind := "baton"
	if bare {
		kind = "bare"
	}
	project := fmt.Sprintf("%s-proc-%v-%s", scaleProject, row, kind)
	cli, err := cluster.NewClient()
	if err != nil {
		return r, err
	}
	defer cli.Close()
	keys, err := election.New(cli, election.Config{}) // for Leaders (the key layout's one home) only
	if err != nil {
		return r, err
	}
	f := &procFleet{}
	defer func() {
		if serr := f.stopAll(); serr != nil && err == nil && r.failed == "" {
			r.failed = serr.Error()
		}
		if !bare {
			r.overlaps, r.terms, r.overlap = f.overlaps()
		}
		if r.failed != "" {
			fmt.Printf("batonbench: scale %v (worker processes, %s): %s\n", row, kind, r.failed)
		}
	}()
	// Leaders reads every candidate key at once: at 10,000 x 10 that is 100,000 keys, so it is
	// polled no faster than it answers.
	leaders := func() (map[string]int, int, error) {
		if bare {
			byID, n := map[string]int{}, 0
			for _, w := range f.workers {
				s, _ := w.last()
				byID[w.id] = s.leading
				n += s.leading
			}
			return byID, n, nil
		}
		ls, err := keys.Leaders(ctx, project)
		if err != nil {
			return nil, 0, err
		}
		byID := map[string]int{}
		for _, l := range ls {
			byID[l.ID]++
		}
		return byID, len(ls), nil
	}
	start := time.Now()
	for i := range row.workers {
		w, err := startProcWorker(ctx, fmt.Sprintf("p%d", i), cluster.Endpoints()[0], project, row.queues, o.scaleTTL, bare)
		if err != nil {
			return r, err
		}
		f.workers = append(f.workers, w)
	}
	r.processes = row.workers
	err = testkit.Poll(ctx, scaleWait, 100*time.Millisecond, func() error {
		_, n, err := leaders()
		if err != nil {
			return err
		}
		if n < row.queues {
			return fmt.Errorf("%d of %d queues led", n, row.queues)
		}
		return nil
	})
	r.allLed = time.Since(start)
	if err != nil {
		// Memory is measured all the same: a fleet that cannot lead every queue is the one to size.
		r.failed = fmt.Sprintf("not every queue led within %v of start: %v", scaleWait, err)
		if serr := r.measure(ctx, f, row, kind); serr != nil {
			r.failed += "; " + serr.Error()
		}
		return r, ctx.Err()
	}
	// Counts still for two seconds (or half a minute: the figures here are memory, not the spread,
	// which the in-process rows measure), then every worker's own figures.
	deadline := time.Now().Add(30 * time.Second)
	var last []int
	stillSince := time.Now()
	for time.Now().Before(deadline) && ctx.Err() == nil {
		byID, n, err := leaders()
		if err != nil {
			return r, err
		}
		counts := make([]int, len(f.workers))
		for i, w := range f.workers {
			counts[i] = byID[w.id]
		}
		if !slices.Equal(counts, last) || n < row.queues {
			last, stillSince = counts, time.Now()
		} else if time.Since(stillSince) >= 2*time.Second {
			r.still = true
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	r.counts = last
	if err := r.measure(ctx, f, row, kind); err != nil {
		r.failed = err.Error()
	}
	return r, ctx.Err()
}

// measure reads every worker's own figures from a stat line it printed after this call.
func (r *procResult) measure(ctx context.Context, f *procFleet, row scaleRow, kind string) error {
	stats, err := f.fresh(ctx)
	if err != nil {
		return err
	}
	for _, s := range stats {
		r.maxHWM = max(r.maxHWM, s.hwm)
		r.maxRSS = max(r.maxRSS, s.rss)
		r.sessionsLost += s.sessionsLost
		r.elected += s.leading
	}
	fmt.Printf("batonbench: scale %v (worker processes, %s): all led: %v after %v; leading %v (still: %v); per process VmHWM/VmRSS MiB:",
		row, kind, r.failed == "", r.allLed.Round(10*time.Millisecond), r.counts, r.still)
	for _, s := range stats {
		fmt.Printf(" %.0f/%.0f", s.hwm, s.rss)
	}
	fmt.Println()
	return nil
}

// benchScaleProcs measures memory per worker process for row, Baton beside bare concurrency.Election.
func benchScaleProcs(ctx context.Context, cluster *etcdtest.Cluster, o options, row scaleRow) ([]benchreport.Figure, error) {
	began := time.Now()
	baton, err := runProcFleet(ctx, cluster, o, row, false)
	if err != nil {
		return nil, fmt.Errorf("baton: %w", err)
	}
	bare, err := runProcFleet(ctx, cluster, o, row, true)
	if err != nil {
		return nil, fmt.Errorf("bare: %w", err)
	}
	fmt.Printf("batonbench: scale %v (worker processes): took %v\n", row, time.Since(began).Round(time.Second))
	if baton.overlap != "" {
		fmt.Printf("batonbench: scale %v (worker processes): TWO LEADERS: %s\n", row, baton.overlap)
	}
	n := fmt.Sprintf("scale %v, one process per worker", row)
	const bareName = "bare concurrency.Election"
	ok := baton.failed == ""
	led, notLed := "", ""
	if !ok {
		led, notLed = " (NOT every queue led)", ", every queue led"
	}
	return []benchreport.Figure{
		one(n+": peak memory (VmHWM) of the largest worker"+led, "MiB", baton.maxHWM, bareName, bare.maxHWM,
			"<= 200 MiB per worker process"+notLed, ok && baton.maxHWM > 0 && baton.maxHWM <= 200),
		one(n+": resident memory (VmRSS) of the largest worker, at rest"+led, "MiB", baton.maxRSS, bareName, bare.maxRSS,
			"<= 200 MiB per worker process"+notLed, ok && baton.maxRSS > 0 && baton.maxRSS <= 200),
		one(n+": every queue led after start (read from etcd, polled)", "ms", benchreport.Ms(baton.allLed), bareName+" (workers' counts)",
			benchreport.Ms(bare.allLed), "informative: includes process start", ok),
		one(n+": sessions lost for want of CPU", "sessions", float64(baton.sessionsLost), bareName, float64(bare.sessionsLost),
			"0", baton.sessionsLost == 0),
		one(fmt.Sprintf("%s: queues with two leaders at once (of %d terms)", n, baton.terms), "queues", float64(baton.overlaps),
			"-", 0, "0", baton.overlaps == 0 && baton.terms > 0),
	}, nil
}

package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// Memory per worker process: each worker of the fleet is this binary re-executed in worker mode
// (scaleWorkerMode), a process of its own as in production, whose VmRSS and VmHWM the parent reads in
// /proc. Leadership is read from etcd, not from what the workers say; a worker reports on stdout, as it
// exits, its session losses and every term it held (workerReport, as JSON).

// scaleWorkerMode is the first argument that makes batonbench a scale worker; it is not a flag, so it
// stays out of -help.
const scaleWorkerMode = "scale-worker"

// workerReport is what a worker process prints as it exits: its session losses, and every term it
// held as [start, end] on the wall clock the processes share.
type workerReport struct {
	Lost  int64
	Terms map[string][][2]time.Time
}

// scaleWorker runs one worker, a fleet of one, until its stdin closes (the parent's signal to stop
// gracefully, and what happens when the parent dies), then resigns, prints its terms and session
// losses, and returns. It reaches the bench's etcd as an external cluster (etcdx.EnvEndpoints).
func scaleWorker(args []string) error {
	fs := flag.NewFlagSet(scaleWorkerMode, flag.ContinueOnError)
	id := fs.String("id", "", "server ID")
	project := fs.String("project", scaleProject, "project")
	queues := fs.Int("queues", 0, "queues q00000..")
	ttl := fs.Duration("ttl", 0, "lease TTL; 0 is election's default")
	bare := fs.Bool("bare", false, "bare concurrency.Election instead of Baton")
	profile := fs.String("profile", "", "directory for the worker's heap and goroutine profiles, written at rest (as it is told to stop)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" || *queues < 1 || os.Getenv(etcdx.EnvEndpoints) == "" {
		return fmt.Errorf("%s: -id, -queues (>= 1) and %s are required", scaleWorkerMode, etcdx.EnvEndpoints)
	}
	cluster, err := etcdx.StartCluster(etcdx.Options{})
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	f := &fleet{cluster: cluster, project: *project, queues: queueNames(*queues), ttl: *ttl, bare: *bare, balance: true, direct: true}
	w, err := f.start(ctx, *id, "")
	if err != nil {
		return err
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	if *profile != "" {
		if err := writeProfiles(*profile, *id+"-", "heap", "goroutine"); err != nil {
			return err
		}
	}
	f.stopAll(ctx)
	return json.NewEncoder(os.Stdout).Encode(workerReport{Lost: w.losses.Load(), Terms: f.terms})
}

// procWorker is the parent's view of one worker process.
type procWorker struct {
	id     string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout io.Reader
}

func startProcWorker(ctx context.Context, id, endpoint, project string, queues int, ttl time.Duration, bare bool, profile string) (*procWorker, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, exe, scaleWorkerMode, "-id", id, "-project", project,
		"-queues", strconv.Itoa(queues), "-ttl", ttl.String(), "-bare="+strconv.FormatBool(bare), "-profile", profile)
	cmd.Env = append(os.Environ(), etcdx.EnvEndpoints+"="+endpoint)
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 15 * time.Second
	w := &procWorker{id: id, cmd: cmd}
	if w.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if w.stdout, err = cmd.StdoutPipe(); err != nil {
		return nil, err
	}
	return w, cmd.Start()
}

// stop closes the worker's stdin (it resigns and exits), reads its report and waits for it.
func (w *procWorker) stop() (workerReport, error) {
	_ = w.stdin.Close()
	var rep workerReport
	read := json.NewDecoder(w.stdout).Decode(&rep)
	if err := w.cmd.Wait(); err != nil {
		return rep, err
	}
	return rep, read
}

type procResult struct {
	allLed          time.Duration
	maxHWM, maxRSS  float64
	sessionsLost    int
	overlaps, terms int
	overlap, failed string
}

// runProcFleet starts row.workers worker processes and measures them.
func runProcFleet(ctx context.Context, cluster *etcdx.Cluster, o options, row scaleRow, bare bool) (r procResult, err error) {
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
	var workers []*procWorker
	defer func() {
		terms := map[string][][2]time.Time{}
		for _, w := range workers {
			rep, serr := w.stop()
			if serr != nil && err == nil && r.failed == "" {
				r.failed = fmt.Sprintf("worker %s: %v", w.id, serr)
			}
			r.sessionsLost += int(rep.Lost)
			for q, ts := range rep.Terms {
				terms[q] = append(terms[q], ts...)
			}
		}
		if !bare {
			r.overlaps, r.terms, r.overlap = overlaps(terms)
		}
		if r.failed != "" {
			fmt.Printf("batonbench: scale %v (worker processes, %s): %s\n", row, kind, r.failed)
		}
	}()
	// leaders is how many queues each worker leads, and all of them. A read covers every candidate key:
	// at 10,000 x 10 that is 100,000 keys, so it is polled no faster than it answers.
	leaders := func() (counts []int, n int, err error) {
		byID := map[string]int{}
		if bare { // concurrency.Election's leader is its prefix's oldest key
			resp, err := cli.Get(ctx, bareKey(project, ""), clientv3.WithPrefix(),
				clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
			if err != nil {
				return nil, 0, err
			}
			led := map[string]bool{}
			for _, kv := range resp.Kvs {
				q, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), bareKey(project, "")), "/")
				if !led[q] {
					led[q] = true
					byID[string(kv.Value)]++
				}
			}
			n = len(led)
		} else {
			ls, err := keys.Leaders(ctx, project)
			if err != nil {
				return nil, 0, err
			}
			for _, l := range ls {
				byID[l.ID]++
			}
			n = len(ls)
		}
		for _, w := range workers {
			counts = append(counts, byID[w.id])
		}
		return counts, n, nil
	}
	profile := ""
	if o.scaleProfile != "" {
		profile = filepath.Join(o.scaleProfile, row.String()+"-processes", kind)
	}
	start := time.Now()
	for i := range row.workers {
		w, err := startProcWorker(ctx, fmt.Sprintf("p%d", i), cluster.Endpoints()[0], project, row.queues, o.scaleTTL, bare, profile)
		if err != nil {
			return r, err
		}
		workers = append(workers, w)
	}
	err = harness.Poll(ctx, scaleWait, 100*time.Millisecond, func() error {
		_, n, err := leaders()
		if err == nil && n < row.queues {
			err = fmt.Errorf("%d of %d queues led", n, row.queues)
		}
		return err
	})
	r.allLed = time.Since(start)
	var counts []int
	var still bool
	if err != nil {
		// Memory is measured all the same: a fleet that cannot lead every queue is the one to size.
		r.failed = fmt.Sprintf("not every queue led within %v of start: %v", scaleWait, err)
	} else if counts, still, err = settle(ctx, 2*time.Second, 200*time.Millisecond, 30*time.Second, func() ([]int, bool, error) {
		// Counts still for two seconds (or half a minute: the figures here are memory, not the
		// spread, which the in-process rows measure), then every worker's memory.
		counts, n, err := leaders()
		return counts, n >= row.queues, err
	}); err != nil {
		return r, err
	}
	fmt.Printf("batonbench: scale %v (worker processes, %s): all led: %v after %v; leading %v (still: %v); per process VmHWM/VmRSS MiB:",
		row, kind, r.failed == "", r.allLed.Round(10*time.Millisecond), counts, still)
	for _, w := range workers {
		status := fmt.Sprintf("/proc/%d/status", w.cmd.Process.Pid)
		hwm, rss := procMiB(status, "VmHWM"), procMiB(status, "VmRSS")
		r.maxHWM, r.maxRSS = max(r.maxHWM, hwm), max(r.maxRSS, rss)
		fmt.Printf(" %.0f/%.0f", hwm, rss)
	}
	fmt.Println()
	return r, ctx.Err()
}

// benchScaleProcs measures memory per worker process for row, Baton beside bare concurrency.Election.
func benchScaleProcs(ctx context.Context, cluster *etcdx.Cluster, o options, row scaleRow) ([]benchreport.Figure, error) {
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
	n, one := fmt.Sprintf("scale %v, one process per worker", row), benchreport.Single
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
		one(n+": every queue led after start (read from etcd, polled)", "ms", benchreport.Ms(baton.allLed), bareName, benchreport.Ms(bare.allLed), "informative: includes process start", ok),
		one(n+": sessions lost for want of CPU", "sessions", float64(baton.sessionsLost), bareName, float64(bare.sessionsLost),
			"0", baton.sessionsLost == 0),
		one(fmt.Sprintf("%s: queues with two leaders at once (of %d terms)", n, baton.terms), "queues", float64(baton.overlaps),
			"-", 0, "0", baton.overlaps == 0 && baton.terms > 0),
	}, nil
}

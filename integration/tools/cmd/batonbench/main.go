// Command batonbench measures Baton beside same-run baselines on real servers started on loopback,
// prints one table and writes bench-results.json. It is `make bench`.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

func main() {
	var err error
	if len(os.Args) > 1 && os.Args[1] == scaleWorkerMode {
		err = scaleWorker(os.Args[2:])
	} else {
		err = run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "batonbench:", err)
		os.Exit(1)
	}
}

// options are the flags; see their usage in run.
type options struct {
	out, doc, only, scaleProfile, scaleRows, stopLogs      string
	rounds, crashRounds, parallel, takeovers, replacements int
	heartbeats, reconcileRounds, naiveRounds, workers      int
	stallRounds, stopBound                                 int
	stopKs                                                 []int
	sweepRuns, sweepRounds, sweepNaiveRounds               int
	scale10k                                               bool
	crashTTL, scaleTTL, scaleRest, simBudget               time.Duration
	replaceHeartbeats                                      []time.Duration
}

func run() error {
	var o options
	flag.StringVar(&o.out, "out", "bench-results.json", "where to write the figures as JSON")
	flag.StringVar(&o.doc, "doc", "", "where to write the figures as Markdown (docs/benchmarks.md); only for a full run")
	flag.IntVar(&o.rounds, "rounds", 200, "graceful handovers per implementation")
	flag.IntVar(&o.crashRounds, "crash-rounds", 100, "crash failovers per implementation")
	flag.IntVar(&o.parallel, "parallel", 10, "crash failovers measured at once (independent queues)")
	flag.IntVar(&o.takeovers, "takeovers", 100, "dispatcher takeovers measured on each FAIL path")
	flag.IntVar(&o.replacements, "replacements", 30, "runs terminated behind their leader's back (one queue each)")
	replaceHeartbeats := flag.String("replace-heartbeats", "0s,1s",
		"heartbeat (and watch) intervals of the replacement figures' Nodes, one round each; 0s is the Node's default")
	flag.IntVar(&o.heartbeats, "heartbeats", 100_000, "heartbeat entries in Redis for the reconcile cycle (1 % stale)")
	flag.IntVar(&o.reconcileRounds, "reconcile-rounds", 10, "reconcile cycles measured")
	flag.IntVar(&o.naiveRounds, "naive-rounds", 3, "naive KEYS + HGETALL cycles measured (slow)")
	flag.IntVar(&o.sweepRuns, "sweep-runs", 2000, "open dispatcher runs (each its live leader's) for the reconcile sweep figure; -sweep-runs 10000 measures the 10k figure (about a minute of set-up on 2 cores)")
	flag.IntVar(&o.sweepRounds, "sweep-rounds", 10, "reconcile cycles measured over the open runs")
	flag.IntVar(&o.sweepNaiveRounds, "sweep-naive-rounds", 3, "sweeps with a leader lookup per run measured (slow)")
	flag.IntVar(&o.workers, "workers", 10_000, "registered workers heartbeating in the registry figure")
	flag.StringVar(&o.scaleRows, "scale-rows", "1000x5,3000x5,10000x5", "the scale curve: <queues>x<workers> rows, comma-separated; the first is measured in full, the others at start-up, at rest and for safety")
	flag.BoolVar(&o.scale10k, "scale-10k", false, "run the 10,000-queue scale rows alone, each in full (10000x5,10000x10; about 15 minutes on 2 cores, most of it the rolling restart without balancing), instead of -scale-rows, with memory per worker process at 10000x10")
	flag.DurationVar(&o.scaleTTL, "scale-ttl", 0, "lease TTL of the scale figures; 0 is election's default")
	flag.DurationVar(&o.scaleRest, "scale-rest", 5*time.Second, "how long etcd requests are counted at rest, and how long the scale section's leadership counts must not change to count as settled")
	flag.StringVar(&o.scaleProfile, "scale-profile", "", "directory for CPU, mutex and block profiles of the scale section's Baton start-up, and heap and goroutine profiles of each worker process at rest")
	flag.IntVar(&o.stallRounds, "stall-rounds", 5, "faults brought about per stall cause in the stall detection figures")
	stopKs := flag.String("stop-ks", "1,10,100,1000", "the whole-worker stop's k: how many queues the stopped worker leads, one stop each, comma-separated")
	flag.IntVar(&o.stopBound, "stop-bound", election.DefaultConfig().MaxHandOvers, "hand-overs at once of the whole-worker stop's floor; Baton's default bound (election.Config.MaxHandOvers)")
	flag.StringVar(&o.stopLogs, "stop-logs", "", "directory for the whole-worker stop's demo-worker logs, at debug level (stop-k<k>-a.log is the stopped worker's)")
	flag.StringVar(&o.only, "only", "", "run only the figures whose name contains this text")
	flag.DurationVar(&o.crashTTL, "crash-ttl", 2*time.Second, "lease TTL for the crash failover rounds")
	flag.DurationVar(&o.simBudget, "sim-budget", 30*time.Second, "how long the sim section runs each simulator batch (SIM_BUDGET; one per world of the simulator)")
	flag.Parse()
	if o.scale10k {
		o.scaleRows = "10000x5,10000x10"
		if o.only == "" {
			o.only = "scale"
		}
	}
	for _, f := range strings.Split(*stopKs, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			return fmt.Errorf("-stop-ks: %q is not a count >= 1", f)
		}
		o.stopKs = append(o.stopKs, k)
	}
	for _, f := range strings.Split(*replaceHeartbeats, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d < 0 {
			return fmt.Errorf("-replace-heartbeats: %q is not a duration >= 0", f)
		}
		o.replaceHeartbeats = append(o.replaceHeartbeats, d)
	}

	began := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	cluster, err := etcdx.StartCluster(etcdx.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()

	fmt.Printf("batonbench: etcd at %v; %d graceful rounds, %d crash rounds (TTL %v, %d at once)\n",
		cluster.Endpoints(), o.rounds, o.crashRounds, o.crashTTL, o.parallel)
	var figures []benchreport.Figure
	all := need{redis: true, temporal: true, etcd: true}
	for _, b := range []struct {
		name string
		need need // the servers a section measures against besides the bench's etcd, its own
		run  func(context.Context, *servers, options) ([]benchreport.Figure, error)
	}{
		{"graceful handover", need{}, benchGraceful},
		{"graceful handover, end to end", all, benchHandoverE2E},
		{"crash failover", need{}, benchCrash},
		{"takeover (FAIL path)", need{temporal: true}, benchTakeover},
		{"replacement after an out-of-band close", all, benchReplace},
		{"reconcile", all, benchReconcile},
		{"reconcile sweep", sweepNeeds, benchSweep},
		{"registry", need{redis: true}, benchRegistry},
		{"scale", need{}, benchScale},
		{"rollout", need{}, benchRollout},
		{"dispatch", need{temporal: true, etcd: true}, benchDispatch},
		{"planned moves", need{temporal: true, etcd: true}, benchPlanned},
		{"planned moves of Nodes (drain, transfer, rollout, stop)", all, benchPlannedNodes},
		{"worker crashes under load", all, benchCrashStall},
		{"orphan cleanup", all, benchOrphans},
		{"orphan cleanup, vacancy before the reconciler's term", all, benchOrphanTerm},
		{"rolling restart under load", all, benchRollingRestart},
		{"Temporal restart under load", all, benchTemporalRestart},
		{"stall detection", all, benchStall},
		{"whole-worker graceful stop", all, benchStopE2E},
		{"sim: the deterministic simulator's batches", need{}, benchSim},
	} {
		if !strings.Contains(b.name, o.only) {
			continue
		}
		start := time.Now()
		s, err := startServers(ctx, cluster, b.need)
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		f, err := b.run(ctx, s, o)
		s.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", b.name, err)
		}
		fmt.Printf("batonbench: %s: section took %v\n", b.name, time.Since(start).Round(time.Second))
		figures = append(figures, f...)
	}
	fmt.Println()
	benchreport.Print(os.Stdout, figures)
	if err := benchreport.Write(o.out, figures); err != nil {
		return err
	}
	fmt.Println("\nwrote", o.out)
	if o.doc != "" && o.only == "" {
		if err := benchreport.Markdown(o.doc, figures, benchreport.Machine(), "make bench", time.Since(began)); err != nil {
			return err
		}
		fmt.Println("wrote", o.doc)
	}
	return nil
}

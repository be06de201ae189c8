// Command drill is `make drill`: Baton's chaos drill on loopback -- a 3-member etcd, a Temporal server
// it can restart, redis-server and N demo workers over M queues, faults injected one at a time while a
// producer sends dispatch requests (-load-rate) -- which prints a fault-by-fault table and the takeover
// latency per fault kind. Package github.com/baton-run/baton/integration/tools/drill describes the faults
// and what is checked.
//
// Exit codes: 0 no violation, 1 violations found, 2 the drill could not run (or was interrupted).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/baton-run/baton/integration/tools/drill"
)

func main() {
	os.Exit(run())
}

func run() int {
	var cfg drill.Config
	def := drill.DefaultConfig()
	var kinds, out string
	var timeout time.Duration
	flag.IntVar(&cfg.Workers, "workers", def.Workers, "demo-worker processes")
	flag.IntVar(&cfg.Queues, "queues", def.Queues, "queues (every worker serves all of them)")
	flag.DurationVar(&cfg.Duration, "duration", def.Duration, "fault phase: no new fault starts after it (a fault started is finished)")
	flag.IntVar(&cfg.Cycles, "cycles", 0, "stop after this many rounds of every fault kind (0: only -duration bounds it)")
	flag.Uint64Var(&cfg.Seed, "seed", 0, "seed of the fault order and targets (0: from the clock; the report shows it)")
	flag.DurationVar(&cfg.TTL, "ttl", def.TTL, "election lease TTL of the workers (2s or more, whole seconds)")
	flag.StringVar(&kinds, "faults", "all", fmt.Sprintf("comma-separated fault kinds, or all: %v", drill.AllKinds))
	flag.DurationVar(&cfg.Settle, "settle", def.Settle, "pause between faults once the fleet has settled")
	flag.DurationVar(&cfg.TakeoverSLA, "takeover-sla", def.TakeoverSLA, "bound for every queue to be owned again after a step")
	flag.DurationVar(&cfg.CleanupSLA, "cleanup-sla", def.CleanupSLA, "bound for an orphaned run or heartbeat key to be cleaned up")
	flag.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", def.HeartbeatInterval, "workers' BATON_HEARTBEAT_INTERVAL")
	flag.DurationVar(&cfg.StaleAfter, "stale-after", def.StaleAfter, "workers' BATON_RECONCILE_STALE_AFTER")
	flag.DurationVar(&cfg.ReconcileInterval, "reconcile-interval", def.ReconcileInterval, "workers' BATON_RECONCILE_INTERVAL")
	flag.Float64Var(&cfg.LoadRate, "load-rate", 10, "dispatch requests per second per loaded queue, sent with SignalWorkflow while the faults run (0: no load)")
	flag.IntVar(&cfg.LoadQueues, "load-queues", 2, "how many of the queues get the load (0: all)")
	flag.StringVar(&cfg.LoadBin, "load-bin", "", "demo-worker binary that runs the load (default: the workers' -bin), e.g. today's producer against an older worker build")
	flag.DurationVar(&cfg.LoadSettle, "load-settle", def.LoadSettle, "bound for the ledger to show every accepted request handled after the last send")
	flag.StringVar(&cfg.Bin, "bin", "", "prebuilt demo-worker binary or its directory (default: go build ./cmd/demo-worker)")
	flag.StringVar(&cfg.LogDir, "logs", "", "keep every process's log in this directory (default: a temporary one, kept only on violations)")
	flag.StringVar(&out, "out", "", "write the JSON report to this file")
	flag.DurationVar(&timeout, "timeout", 0, "hard bound of the whole drill (default: -duration + 15m); the drill stops and cleans up then")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "drill: unexpected argument %q\n", flag.Arg(0))
		return 2
	}
	var err error
	if cfg.Kinds, err = drill.ParseKinds(kinds); err != nil {
		fmt.Fprintln(os.Stderr, "drill:", err)
		return 2
	}
	cfg.Out = os.Stdout

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if timeout <= 0 {
		timeout = cfg.Duration + 15*time.Minute
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, err := drill.Run(ctx, cfg)
	if rep != nil {
		rep.WriteTable(os.Stdout)
		if out != "" {
			if werr := rep.WriteJSON(out); werr != nil {
				fmt.Fprintln(os.Stderr, "drill: report:", werr)
				return 2
			}
			fmt.Printf("Report: %s\n", out)
		}
	}
	switch {
	case err != nil:
		fmt.Fprintln(os.Stderr, "drill:", err)
		return 2
	case !rep.OK():
		return 1
	}
	return 0
}

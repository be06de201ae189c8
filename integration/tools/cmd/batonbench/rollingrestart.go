package main

import (
	"context"
	"fmt"
	"time"

	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// The rolling restart section: three demo-workers serve two queues at an election TTL of 3 s while
// one Producer calls Dispatch 20 times a second in all (10 per queue).
const (
	rollingRate      = 10.0 // Dispatch calls per second per queue
	rollingFloorRun  = 30 * time.Second
	rollingTTL       = 3 * time.Second
	rollingBusyLoops = 2
	rollingPasses    = 3   // rolling restarts back to back, so that the restart phase is about as long as the floor
	rollingP99Factor = 3.0 // the target: p99 across the restart <= this x the same run's no-restart p99
)

// benchRollingRestart measures a rolling restart as its callers see it: three demo-worker processes
// serve q1 and q2, a Producer (`demo-worker load -mode=dispatch`) calls Dispatch on both, and each
// worker in turn is replaced (its successor started and ready, then SIGTERM to the old one, waited
// for); rollingPasses such restarts run back to back, so that the restart phase (3 s before the first
// move to 3 s after the last, all calls sent in it) is about as long as the floor's. Its figures are
// the calls not returned within 30 s, send -> returned across the restarts, and the requests the
// dispatch ledger shows handled twice (a planned move must run no handler twice). The floor is the
// same Producer on the same fleet for 30 s just before, with no restart. The whole
// is done twice: on the machine as it is, and beside two busy loops (a process spinning on a core
// each, the floor measured beside them too).
func benchRollingRestart(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	var figs []benchreport.Figure
	for _, busy := range []bool{false, true} {
		f, err := rollingRound(ctx, s, busy)
		if err != nil {
			return nil, err
		}
		figs = append(figs, f...)
	}
	return figs, nil
}

// rollingRound is one fleet, one floor and one rolling restart; busy adds the busy loops for both.
func rollingRound(ctx context.Context, s *servers, busy bool) ([]benchreport.Figure, error) {
	label, project := "as the machine is", "rolling-quiet"
	if busy {
		label, project = fmt.Sprintf("beside %d busy loops", rollingBusyLoops), "rolling-busy"
		stop, err := busyLoops(rollingBusyLoops)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	f, err := newProducerFleet(s, project, []string{"q1", "q2"}, rollingTTL)
	if err != nil {
		return nil, err
	}
	defer f.close()
	var olds []*workerproc.Proc
	for i := 1; i <= 3; i++ {
		p, err := f.start(ctx, fmt.Sprintf("%s-w%d", project, i))
		if err != nil {
			return nil, err
		}
		olds = append(olds, p)
	}
	if err := f.waitLed(ctx, time.Minute); err != nil {
		return nil, err
	}

	fmt.Printf("batonbench: rolling restart (%s): floor, the Producer at %v/s on each of 2 queues for %v, no restart\n",
		label, rollingRate, rollingFloorRun)
	run, err := f.produce(ctx, project+"-floor", rollingRate)
	if err != nil {
		return nil, err
	}
	sleepCtx(ctx, rollingFloorRun)
	floor, err := run.stop()
	if err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: rolling restart (%s): floor: %v\n", label, floor)

	fmt.Printf("batonbench: rolling restart (%s): the same Producer while the 3 workers are replaced one by one, %d times over\n", label, rollingPasses)
	if run, err = f.produce(ctx, project+"-restart", rollingRate); err != nil {
		return nil, err
	}
	sleepCtx(ctx, 3*time.Second)
	began := time.Now()
	var restartErr error
	for pass := 1; pass <= rollingPasses && restartErr == nil; pass++ {
		var names []string
		for i := range olds {
			names = append(names, fmt.Sprintf("%s-w%d-%d", project, i+1, pass))
		}
		var stops []time.Duration
		var led []int
		olds, stops, led, restartErr = f.rollingRestart(ctx, olds, names)
		fmt.Printf("batonbench: rolling restart (%s): pass %d: old workers led %v queues at SIGTERM and exited %v after it\n",
			label, pass, led, roundAll(stops))
	}
	took := time.Since(began)
	sleepCtx(ctx, 3*time.Second) // calls sent just after the last move belong to it too
	restart, err := run.stop()
	if restartErr != nil {
		return nil, fmt.Errorf("rolling restart: %w", restartErr)
	}
	if err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: rolling restart (%s): %d passes took %v: %v\n", label, rollingPasses, took.Round(time.Millisecond), restart)
	return rollingFigures(label, floor, restart), nil
}

// rollingFigures are the three rows of one rolling restart beside its floor.
func rollingFigures(label string, floor, restart producerResult) []benchreport.Figure {
	name := fmt.Sprintf("rolling restart of 3 demo-workers, %d passes back to back, %s (Producer at %v/s in all on 2 queues, TTL %v)",
		rollingPasses, label, 2*rollingRate, rollingTTL)
	floorMs := floor.latencies()
	floorP99 := benchreport.Percentile(floorMs, 99)
	twice, twiceFloor := -1.0, -1.0 // -1: the ledger could not be read
	if l := restart.summary.Ledger; l != nil {
		twice = float64(l.HandledTwice)
	}
	if l := floor.summary.Ledger; l != nil {
		twiceFloor = float64(l.HandledTwice)
	}
	return []benchreport.Figure{
		benchreport.Single(fmt.Sprintf("%s: Dispatch calls not returned handled within %v (of %d sent)", name, producerSettle, restart.summary.Sent),
			"calls", float64(restart.unreturned()), fmt.Sprintf("no restart (of %d sent)", floor.summary.Sent), float64(floor.unreturned()),
			"0", restart.unreturned() == 0),
		benchreport.NewFigure(name+": send -> Dispatch returned (an unreturned call counts as 30 s)", "ms", restart.latencies(),
			fmt.Sprintf("the same Producer, no restart (p99 %.0f ms)", floorP99), floorMs,
			fmt.Sprintf("p99 <= %v x no-restart p99 = %.0f ms", rollingP99Factor, rollingP99Factor*floorP99),
			func(f benchreport.Figure) bool { return f.Samples > 0 && f.P99 <= rollingP99Factor*floorP99 }),
		benchreport.Single(name+": requests handled twice (the ledger's read-back)", "requests", twice,
			"no restart", twiceFloor, "0", twice == 0),
	}
}

// roundAll rounds each duration to the millisecond, for a log line.
func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

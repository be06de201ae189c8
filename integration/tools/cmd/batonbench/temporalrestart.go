package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/takeover"
)

// The Temporal restart section: three demo-workers serve two queues while one Producer calls
// Dispatch 20 times a second in all; the bench's own Temporal server is stopped for about
// temporalDown and started again on the same port and database.
const (
	temporalRestartRate   = 10.0 // Dispatch calls per second per queue
	temporalRestartFloor  = 30 * time.Second
	temporalDown          = 3 * time.Second
	temporalRestartTarget = 2 * time.Second // p99 Dispatch returned after the server is back
)

// benchTemporalRestart measures what a Temporal restart costs Dispatch callers: for the calls sent
// before the server was back and returned after it went down, the time from the server accepting
// calls again (Restart returned: the frontend answers and the namespace is usable) to each call
// returned, of which the first and the p99. The floor is the same Producer's send -> returned on the
// same fleet for 30 s just before, with no restart.
func benchTemporalRestart(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	if s.temporal.External() {
		return nil, fmt.Errorf("the Temporal server is an external one (BATON_TEMPORAL_ADDRESS): the bench cannot restart it")
	}
	f, err := newProducerFleet(s, "temporal-restart", []string{"q1", "q2"}, rollingTTL)
	if err != nil {
		return nil, err
	}
	defer f.close()
	for i := 1; i <= 3; i++ {
		if _, err := f.start(ctx, fmt.Sprintf("temporal-restart-w%d", i)); err != nil {
			return nil, err
		}
	}
	if err := f.waitLed(ctx, time.Minute); err != nil {
		return nil, err
	}

	fmt.Printf("batonbench: Temporal restart: floor, the Producer at %v/s on each of 2 queues for %v, no restart\n",
		temporalRestartRate, temporalRestartFloor)
	run, err := f.produce(ctx, "temporal-restart-floor", temporalRestartRate)
	if err != nil {
		return nil, err
	}
	sleepCtx(ctx, temporalRestartFloor)
	floor, err := run.stop()
	if err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: Temporal restart: floor: %v\n", floor)

	if run, err = f.produce(ctx, "temporal-restart", temporalRestartRate); err != nil {
		return nil, err
	}
	sleepCtx(ctx, 5*time.Second)
	stopping := time.Now()
	if err := s.temporal.Stop(); err != nil {
		return nil, err
	}
	down := time.Now() // the port is closed once Stop returns
	sleepCtx(ctx, temporalDown)
	if err := s.temporal.Restart(ctx); err != nil {
		return nil, fmt.Errorf("restart: %w", err)
	}
	back := time.Now()
	fmt.Printf("batonbench: Temporal restart: stopped in %v, down for %v, back %v after the stop began\n",
		down.Sub(stopping).Round(time.Millisecond), back.Sub(down).Round(time.Millisecond), back.Sub(stopping).Round(time.Millisecond))
	sleepCtx(ctx, 10*time.Second)
	restart, err := run.stop()
	if err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: Temporal restart: %v\n", restart)
	task, err := firstTaskAfter(ctx, s, "temporal-restart", f.queues, back)
	if err != nil {
		return nil, err
	}

	// The calls the restart held: sent before the server was back, returned after it went down.
	var after []float64
	for _, c := range restart.calls {
		if c.sent.Before(back) && c.returned.After(down) {
			after = append(after, benchreport.Ms(c.returned.Sub(back)))
		}
	}
	for range restart.unreturned() { // when sent is unknown: counted as held, never returned
		after = append(after, benchreport.Ms(producerSettle))
	}
	slices.Sort(after)
	first := -1.0
	if len(after) > 0 {
		first = after[0]
	}
	floorMs := floor.latencies()
	fmt.Printf("batonbench: Temporal restart: %d calls held across it; after the server was back, the first returned at %.0f ms\n", len(after), first)
	name := fmt.Sprintf("Temporal restart under load (down %v; 3 demo-workers, Producer at %v/s in all on 2 queues)",
		back.Sub(down).Round(100*time.Millisecond), 2*temporalRestartRate)
	floorText := fmt.Sprintf("the same Producer's send -> returned, no restart (p99 %.0f ms)", benchreport.Percentile(floorMs, 99))
	return []benchreport.Figure{
		benchreport.Single(name+": server back (Restart returned) -> first Dispatch returned", "ms", first,
			"no-restart send -> returned p50", benchreport.Percentile(floorMs, 50), "informational (the target is on the p99)", true),
		benchreport.Single(name+": server back (Restart returned) -> first workflow task a worker started on a dispatcher run (its history)", "ms", task,
			"no-restart send -> returned p50", benchreport.Percentile(floorMs, 50), "informational (where the wait is: workers or Producer)", true),
		benchreport.NewFigure(name+": server back (Restart returned) -> each held Dispatch returned (calls sent before it was back)", "ms", after,
			floorText, floorMs, fmt.Sprintf("p99 <= %v", temporalRestartTarget),
			func(f benchreport.Figure) bool {
				return f.Samples > 0 && f.P99 <= benchreport.Ms(temporalRestartTarget)
			}),
		benchreport.Single(fmt.Sprintf("%s: Dispatch calls not returned handled within %v (of %d sent)", name, producerSettle, restart.summary.Sent),
			"calls", float64(restart.unreturned()), fmt.Sprintf("no restart (of %d sent)", floor.summary.Sent), float64(floor.unreturned()),
			"0", restart.unreturned() == 0),
	}, nil
}

// firstTaskAfter is how long after t a worker first started a workflow task on any of the queues'
// current dispatcher runs (the WorkflowTaskStarted events of their histories), in ms; -1 if none did.
func firstTaskAfter(ctx context.Context, s *servers, project string, queues []string, t time.Time) (float64, error) {
	first := -1.0
	for _, q := range queues {
		id, err := takeover.WorkflowID(project, q)
		if err != nil {
			return 0, err
		}
		iter := s.tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for iter.HasNext() {
			ev, err := iter.Next()
			if err != nil {
				return 0, fmt.Errorf("%s's history: %w", id, err)
			}
			if at := ev.GetEventTime().AsTime(); ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED && at.After(t) {
				if ms := benchreport.Ms(at.Sub(t)); first < 0 || ms < first {
					first = ms
				}
				break
			}
		}
	}
	return first, nil
}

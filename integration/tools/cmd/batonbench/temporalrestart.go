package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/takeover"
)

// The Temporal restart section: three demo-workers serve two queues while one Producer calls
// Dispatch 20 times a second in all; the bench's own Temporal server is stopped for about
// temporalDown and started again on the same port and database, temporalRestarts times, 5 s apart.
const (
	temporalRestartRate   = 10.0 // Dispatch calls per second per queue
	temporalRestartFloor  = 30 * time.Second
	temporalDown          = 3 * time.Second
	temporalRestarts      = 3
	temporalRestartTarget = 2 * time.Second // p99 Dispatch returned after the server is back
)

// benchTemporalRestart measures what a Temporal restart costs Dispatch callers: for the calls sent
// before the server was back and returned after it went down, the time from the server accepting
// calls again (Restart returned: the frontend answers and the namespace is usable) to each call
// returned: the first of each restart, and the p99 of all. Beside them, the first workflow task a
// worker started after each restart (read from the current runs' histories): the share of the wait
// that is the workers' rather than the Producer's retry backoff. The floor is the same Producer's
// send -> returned on the same fleet for 30 s just before, with no restart.
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
	var downs []temporalOutage
	for i := range temporalRestarts {
		sleepCtx(ctx, 5*time.Second)
		stopping := time.Now()
		if err := s.temporal.Stop(); err != nil {
			return nil, err
		}
		o := temporalOutage{down: time.Now()} // the port is closed once Stop returns
		sleepCtx(ctx, temporalDown)
		if err := s.temporal.Restart(ctx); err != nil {
			return nil, fmt.Errorf("restart %d: %w", i+1, err)
		}
		o.back = time.Now()
		downs = append(downs, o)
		fmt.Printf("batonbench: Temporal restart %d: stopped in %v, down for %v\n",
			i+1, o.down.Sub(stopping).Round(time.Millisecond), o.back.Sub(o.down).Round(time.Millisecond))
		sleepCtx(ctx, 5*time.Second)
	}
	restart, err := run.stop()
	if err != nil {
		return nil, err
	}
	fmt.Printf("batonbench: Temporal restart: %v\n", restart)
	return temporalRestartFigures(ctx, s, f.queues, floor, restart, downs)
}

// temporalOutage is one stop of the server: Stop returned (down), Restart returned (back).
type temporalOutage struct{ down, back time.Time }

// temporalRestartFigures attributes each call to the first outage it was held across (sent before
// the server was back, returned after it went down) and returns the section's figures.
func temporalRestartFigures(ctx context.Context, s *servers, queues []string, floor, restart producerResult, downs []temporalOutage) ([]benchreport.Figure, error) {
	var after, firsts, tasks []float64
	held := make([][]float64, len(downs))
	for _, c := range restart.calls {
		for i, o := range downs {
			if c.sent.Before(o.back) && c.returned.After(o.down) {
				held[i] = append(held[i], benchreport.Ms(c.returned.Sub(o.back)))
				break
			}
		}
	}
	var downFor []time.Duration
	for i, o := range downs {
		if len(held[i]) == 0 {
			return nil, fmt.Errorf("restart %d: no Dispatch call was held across it", i+1)
		}
		slices.Sort(held[i])
		after, firsts = append(after, held[i]...), append(firsts, held[i][0])
		task, runs, err := firstTaskAfter(ctx, s, "temporal-restart", queues, o.back)
		if err != nil {
			return nil, err
		}
		tasks = append(tasks, task)
		downFor = append(downFor, o.back.Sub(o.down).Round(100*time.Millisecond))
		fmt.Printf("batonbench: Temporal restart %d: %d calls held; after the server was back the first workflow task started at %.0f ms, the first call returned at %.0f ms, the p99 at %.0f ms; %d dispatcher runs of the 2 queues open since\n",
			i+1, len(held[i]), task, held[i][0], benchreport.Percentile(held[i], 99), runs)
	}
	for range restart.unreturned() { // when sent is unknown: counted as held, never returned
		after = append(after, benchreport.Ms(producerSettle))
	}
	floorMs := floor.latencies()
	name := fmt.Sprintf("Temporal restart under load (%d restarts, down %v; 3 demo-workers, Producer at %v/s in all on 2 queues)",
		len(downs), downFor, 2*temporalRestartRate)
	floorP50, floorP99 := benchreport.Percentile(floorMs, 50), benchreport.Percentile(floorMs, 99)
	return []benchreport.Figure{
		benchreport.NewFigure(name+": server back (Restart returned) -> first Dispatch returned, per restart", "ms", firsts,
			fmt.Sprintf("no-restart send -> returned (p50 %.0f ms)", floorP50), floorMs, "informational (the target is on the p99)", benchreport.Informational),
		benchreport.NewFigure(name+": server back -> first workflow task a worker started on a dispatcher run (its history), per restart", "ms", tasks,
			fmt.Sprintf("no-restart send -> returned (p50 %.0f ms)", floorP50), floorMs, "informational (the workers' share of the wait)", benchreport.Informational),
		benchreport.NewFigure(name+": server back -> each held Dispatch returned (calls sent before it was back)", "ms", after,
			fmt.Sprintf("the same Producer's send -> returned, no restart (p99 %.0f ms)", floorP99), floorMs, fmt.Sprintf("p99 <= %v", temporalRestartTarget),
			func(f benchreport.Figure) bool {
				return f.Samples > 0 && f.P99 <= benchreport.Ms(temporalRestartTarget)
			}),
		benchreport.Single(fmt.Sprintf("%s: Dispatch calls not returned handled within %v (of %d sent)", name, producerSettle, restart.summary.Sent),
			"calls", float64(restart.unreturned()), fmt.Sprintf("no restart (of %d sent)", floor.summary.Sent), float64(floor.unreturned()),
			"0", restart.unreturned() == 0),
	}, nil
}

// firstTaskAfter is how long after t a worker first started a workflow task on any run of the
// queues' dispatcher IDs (the WorkflowTaskStarted events of their histories; runs listed from
// visibility, which has caught up by the time the section's producer finished), in ms; -1 if none did.
// It also returns how many runs were open at t or after.
func firstTaskAfter(ctx context.Context, s *servers, project string, queues []string, t time.Time) (float64, int, error) {
	first, open := -1.0, 0
	for _, q := range queues {
		id, err := takeover.WorkflowID(project, q)
		if err != nil {
			return 0, 0, err
		}
		runs, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: fmt.Sprintf("WorkflowId = '%s'", id), PageSize: 1000})
		if err != nil {
			return 0, 0, fmt.Errorf("%s's runs: %w", id, err)
		}
		for _, run := range runs.GetExecutions() {
			if c := run.GetCloseTime(); c != nil && c.AsTime().Before(t) {
				continue
			}
			open++
			iter := s.tc.GetWorkflowHistory(ctx, id, run.GetExecution().GetRunId(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
			for iter.HasNext() {
				ev, err := iter.Next()
				if err != nil {
					return 0, 0, fmt.Errorf("%s's history: %w", id, err)
				}
				if at := ev.GetEventTime().AsTime(); ev.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED && at.After(t) {
					if ms := benchreport.Ms(at.Sub(t)); first < 0 || ms < first {
						first = ms
					}
					break
				}
			}
		}
	}
	return first, open, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/faults"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/takeover"
)

// The stall detection section's Node: heartbeat stallHeartbeat, its run's progress checked every
// heartbeat (the default), and each cause's threshold short, as in the progress tests.
const (
	stallHeartbeat   = 500 * time.Millisecond
	stallPollWindow  = time.Second // PollerWindow: its minimum, so that a stopped worker stops counting soon
	stallTaskStuck   = 2 * time.Second
	stallPendingMax  = 2 * time.Second
	stallCallTimeout = time.Second
	stallAttempts    = 2
	stallQueue       = "q"
	stallLimit       = 30 * time.Second // a detection, a recovery or a settling slower than this fails the section
	// dispatchRetryInitial is the dispatch activity's first retry backoff (dispatcher: activityContexts),
	// doubled at each retry (Temporal's default coefficient).
	dispatchRetryInitial = 200 * time.Millisecond
)

// stallConfig is the Node of project, leading stallQueue alone.
func stallConfig(project string) baton.Config {
	return baton.Config{Project: project, Queues: []string{stallQueue}, ServerID: "bench-stall-owner",
		Heartbeat: heartbeat.Config{Interval: stallHeartbeat},
		Progress: progress.Config{Interval: stallHeartbeat, PollerWindow: stallPollWindow, TaskStuckAfter: stallTaskStuck,
			FailingAttempts: stallAttempts, PendingMax: stallPendingMax, CallTimeout: stallCallTimeout}}
}

// A stallCase is how one cause is brought about: prepare sets the fault up without any effect yet
// (the run stays idle and judged healthy), trigger makes it bite at the measured instant, and heal
// removes it.
type stallCase struct {
	cause       progress.Cause
	threshold   time.Duration // the cause's own threshold, from the trigger
	thresholdIs string
	fault       string // what prepare and trigger do, for the figure
	healIs      string
	prepare     func(context.Context, *stallOwner) error
	trigger     func(context.Context, *stallOwner) error
	heal        func(context.Context, *stallOwner) error
}

// failingAfter is dispatch_failing's threshold: Temporal counts attempt FailingAttempts as soon as
// attempt FailingAttempts-1 fails (it schedules the retry with that attempt number), so the owner can
// see it after the backoffs before attempt FailingAttempts-1 and that attempt's failure: 0 at
// FailingAttempts 2, the first attempt's failure alone.
func failingAfter(attempts int32) time.Duration {
	var d time.Duration
	for k := int32(1); k <= attempts-2; k++ {
		d += dispatchRetryInitial << (k - 1)
	}
	return d
}

// stallCases are the causes in the order progress.Check looks for them. Each threshold is the one
// the cause's documentation promises, counted from the trigger; where Temporal's view makes the
// owner see it later, the figure shows it:
//
//   - no_pollers: the request's workflow task first goes to the stopped worker's sticky queue, and
//     Temporal schedules it anew on the task queue after StickyScheduleToStartTimeout
//     (dispatcher.WorkerOptions: 1s), with a new scheduled time, from which the check counts;
//   - workflow_task_stuck: the Go SDK fails the first attempt and lets the next ones time out
//     (takeover's WorkflowTaskTimeout, 2s; Temporal adds 5s, 10s, ... from the fourth attempt),
//     and every attempt has a new scheduled time, so the check sees the first attempt that outlives
//     TaskStuckAfter, not the task's age since the request.
func stallCases() []stallCase {
	none := func(context.Context, *stallOwner) error { return nil }
	send := func(ctx context.Context, o *stallOwner) error { return o.send(ctx) }
	goodWorker := func(_ context.Context, o *stallOwner) error { o.stopWorker(); return o.startWorker(false) }
	return []stallCase{{
		cause: progress.CauseUnreachable, threshold: stallCallTimeout, thresholdIs: "CallTimeout: a check's describe times out",
		fault: "the Node's Temporal connection blackholed (TCP proxy)", healIs: "partition healed",
		prepare: none, trigger: func(_ context.Context, o *stallOwner) error { o.proxy.Blackhole(); return nil },
		heal: func(_ context.Context, o *stallOwner) error { o.proxy.Heal(); return nil },
	}, {
		cause: progress.CauseNoPollers, threshold: dispatcher.DefaultStickyScheduleToStartTimeout + stallHeartbeat,
		thresholdIs: "the stopped worker's sticky schedule-to-start timeout (dispatcher.WorkerOptions), then the progress interval: the request's workflow task waits longer",
		fault:       fmt.Sprintf("a request sent once the only dispatcher worker stopped and no poll is within PollerWindow (%v)", stallPollWindow),
		healIs:      "dispatcher worker started", trigger: send, heal: goodWorker,
		prepare: func(ctx context.Context, o *stallOwner) error { return o.awaitNoPollers(ctx) },
	}, {
		cause: progress.CauseTaskStuck, threshold: stallTaskStuck, thresholdIs: "TaskStuckAfter from the task's schedule, or attempt FailingAttempts, whichever comes first",
		fault: "a request sent while the only worker's dispatcher workflow panics", healIs: "broken worker replaced by a good one",
		prepare: func(_ context.Context, o *stallOwner) error { o.stopWorker(); return o.startWorker(true) }, trigger: send, heal: goodWorker,
	}, {
		cause: progress.CauseDispatchFailing, threshold: failingAfter(stallAttempts),
		thresholdIs: fmt.Sprintf("Temporal shows attempt FailingAttempts = %d once attempt %d fails: the retry backoffs before attempt %d, %v doubling",
			stallAttempts, stallAttempts-1, stallAttempts-1, dispatchRetryInitial),
		fault: "a request sent while the ledger fails every write", healIs: "ledger writes again",
		prepare: func(_ context.Context, o *stallOwner) error { o.ledger.Failing.Store(true); return nil }, trigger: send,
		heal: func(_ context.Context, o *stallOwner) error { o.ledger.Failing.Store(false); return nil },
	}, {
		cause: progress.CauseOldestPending, threshold: stallPendingMax, thresholdIs: "PendingMax, from the request's acceptance",
		fault: "a request sent while the handler blocks", healIs: "handler released",
		prepare: func(_ context.Context, o *stallOwner) error { o.gate.hold(); return nil }, trigger: send,
		heal: func(_ context.Context, o *stallOwner) error { o.gate.release(); return nil },
	}}
}

// benchStall measures how soon the owner of a queue (a real baton.Node) shows, in its Status, that
// its dispatcher run makes no progress, per cause: o.stallRounds times per cause, a fault is brought
// about in a healthy, idle Node's run, timed from its trigger to the status showing the cause
// (polled every 2 ms), then removed, timed to the status showing no cause. Each cause has a Node of
// its own (its own project and queue), whose Temporal connection runs through a TCP proxy; the
// queue's dispatcher worker, its ledger and its handler are the bench's, on a Temporal connection
// of their own. The causes run side by side, each on its own Node, to keep the section short. The
// baseline is the heartbeat interval, which is the progress interval too; the target is two of them
// after the cause's own threshold (a check runs every [interval/2, interval], and its calls take
// their time).
func benchStall(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	if o.stallRounds < 1 {
		return nil, fmt.Errorf("-stall-rounds must be at least 1, got %d", o.stallRounds)
	}
	fmt.Printf("batonbench: stall detection: %d rounds per cause, heartbeat = progress interval %v, PollerWindow %v, TaskStuckAfter %v, FailingAttempts %d, PendingMax %v, CallTimeout %v\n",
		o.stallRounds, stallHeartbeat, stallPollWindow, stallTaskStuck, stallAttempts, stallPendingMax, stallCallTimeout)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cases := stallCases()
	results, errs := make([]stallSamples, len(cases)), make([]error, len(cases))
	var wg sync.WaitGroup
	for i, c := range cases {
		wg.Go(func() {
			if results[i], errs[i] = stallRounds(ctx, s, c, o.stallRounds); errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", c.cause, errs[i])
				cancel() // the other causes' rounds stop too
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	var figures []benchreport.Figure
	for i, c := range cases {
		r := results[i]
		fmt.Printf("batonbench: stall detection: %s: detection p50 %v, recovery p50 %v; first report: %s\n", c.cause,
			benchreport.Percentile(r.detect, 50).Round(time.Millisecond), benchreport.Percentile(r.recover, 50).Round(time.Millisecond), r.detail)
		if len(r.others) > 0 || r.notReady > 0 {
			fmt.Printf("batonbench: stall detection: %s: NOTE other causes shown meanwhile %v; readiness not ErrDispatcherStalled at %d detections\n",
				c.cause, r.others, r.notReady)
		}
		figures = append(figures, stallFigures(c, r)...)
	}
	return figures, nil
}

// stallSamples are one cause's rounds: detection and recovery times, the first detection's report
// detail, the other causes the status showed before the one brought about or before it cleared, and
// the detections at which readiness did not fail with ErrDispatcherStalled.
type stallSamples struct {
	detect, recover []time.Duration
	detail          string
	others          []progress.Cause
	notReady        int
}

// stallRounds runs n rounds of c on a Node of its own.
func stallRounds(ctx context.Context, s *servers, c stallCase, n int) (stallSamples, error) {
	o, err := startStallOwner(ctx, s, "stall-"+string(c.cause))
	if err != nil {
		return stallSamples{}, err
	}
	defer o.close(ctx)
	var r stallSamples
	for i := range n {
		if err := o.round(ctx, c, &r); err != nil {
			return r, fmt.Errorf("round %d: %w", i+1, err)
		}
	}
	return r, nil
}

// round is one fault of c: set up, triggered, shown, removed, cleared; the run is healthy and idle
// before the trigger and again after the round.
func (o *stallOwner) round(ctx context.Context, c stallCase, r *stallSamples) error {
	if err := c.prepare(ctx, o); err != nil {
		return fmt.Errorf("setting the fault up: %w", err)
	}
	if err := o.awaitHealthy(ctx, time.Now()); err != nil {
		return fmt.Errorf("fault set up, not triggered: %w", err)
	}
	start := time.Now()
	if err := c.trigger(ctx, o); err != nil {
		return err
	}
	qs, err := o.await(ctx, c.cause, r, func(rep *progress.Report) bool { return rep.Cause == c.cause })
	if err != nil {
		return fmt.Errorf("%s not shown: %w", c.cause, err)
	}
	r.detect = append(r.detect, time.Since(start))
	if r.detail == "" {
		r.detail = qs.Progress.Detail
	}
	if err := o.node.Ready(); !errors.Is(err, baton.ErrDispatcherStalled) {
		r.notReady++
	}
	start = time.Now()
	if err := c.heal(ctx, o); err != nil {
		return err
	}
	if _, err := o.await(ctx, c.cause, r, func(rep *progress.Report) bool { return !rep.Stalled() }); err != nil {
		return fmt.Errorf("%s not cleared: %w", c.cause, err)
	}
	r.recover = append(r.recover, time.Since(start))
	return o.awaitHealthy(ctx, time.Now())
}

// stallFigures are c's detection and recovery figures.
func stallFigures(c stallCase, r stallSamples) []benchreport.Figure {
	hb := []float64{benchreport.Ms(stallHeartbeat)}
	bound := benchreport.Ms(c.threshold + 2*stallHeartbeat)
	name := fmt.Sprintf("stall detection, %s (Node, heartbeat = progress interval %v): %s", c.cause, stallHeartbeat, c.fault)
	return []benchreport.Figure{
		benchreport.NewFigure(name+": trigger -> Status shows the cause", "ms", benchreport.Millis(r.detect),
			"heartbeat interval", hb, fmt.Sprintf("p95 <= threshold %v (%s) + 2 heartbeats = %.0f ms", c.threshold, c.thresholdIs, bound),
			func(f benchreport.Figure) bool { return f.P95 <= bound }),
		benchreport.NewFigure(name+": "+c.healIs+" -> Status shows no cause", "ms", benchreport.Millis(r.recover),
			"heartbeat interval", hb, "informational", benchreport.Informational),
	}
}

// stallOwner is one cause's Node and what the bench brings faults about through: the Node's own
// Temporal connection, through a proxy, and the queue's dispatcher worker, its ledger and its
// handler.
type stallOwner struct {
	s         *servers
	node      *baton.Node
	proxy     *etcdx.Proxy
	tc        client.Client // the Node's, through proxy
	ledger    *faults.Ledger
	gate      *handlerGate
	worker    worker.Worker // the queue's dispatcher worker (nil: none runs)
	taskQueue string
	sent      int
}

// startStallOwner starts a good dispatcher worker and a Node of project, and waits until the Node
// leads the queue with a run judged healthy.
func startStallOwner(ctx context.Context, s *servers, project string) (_ *stallOwner, err error) {
	o := &stallOwner{s: s, ledger: &faults.Ledger{}, gate: &handlerGate{}, taskQueue: takeover.DefaultTaskQueue(project, stallQueue)}
	defer func() {
		if err != nil {
			o.close(ctx)
		}
	}()
	if o.proxy, err = etcdx.NewProxy(s.temporal.HostPort()); err != nil {
		return nil, err
	}
	if o.tc, err = s.temporal.NewClient(func(co *client.Options) { co.HostPort = o.proxy.Addr() }); err != nil {
		return nil, err
	}
	if err = o.startWorker(false); err != nil {
		return nil, err
	}
	if o.node, err = baton.New(stallConfig(project), s.etcd, o.tc, s.rdb); err != nil {
		return nil, err
	}
	if err = o.node.Start(ctx); err != nil {
		return nil, err
	}
	return o, o.awaitHealthy(ctx, time.Now())
}

// close stops the Node, then the worker, then the Node's connection and its proxy, with every fault
// removed first.
func (o *stallOwner) close(ctx context.Context) {
	o.gate.release()
	o.ledger.Failing.Store(false)
	if o.proxy != nil {
		o.proxy.Heal()
	}
	if o.node != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		if err := o.node.Stop(sctx); err != nil {
			fmt.Println("batonbench: stall detection: stopping the node:", err)
		}
		cancel()
	}
	o.stopWorker()
	if o.tc != nil {
		o.tc.Close()
	}
	if o.proxy != nil {
		o.proxy.Close()
	}
}

// startWorker runs the queue's dispatcher worker: the reference dispatcher with the bench's ledger and
// handler or, broken, a dispatcher workflow that panics on every workflow task (a bad deploy).
func (o *stallOwner) startWorker(broken bool) error {
	w := worker.New(o.s.tc, o.taskQueue, dispatcher.WorkerOptions(worker.Options{}))
	if broken {
		w.RegisterWorkflowWithOptions(func(workflow.Context, dispatcher.Input) error { panic("batonbench: a broken deploy") },
			workflow.RegisterOptions{Name: takeover.DefaultWorkflowType})
	} else {
		dispatcher.Register(w, &dispatcher.Activities{Ledger: o.ledger, Handler: o.gate.handle, History: o.s.tc})
	}
	if err := w.Start(); err != nil {
		return err
	}
	o.worker = w
	return nil
}

// stopWorker stops the queue's dispatcher worker, if one runs.
func (o *stallOwner) stopWorker() {
	if o.worker != nil {
		o.worker.Stop()
		o.worker = nil
	}
}

// awaitNoPollers stops the dispatcher worker and waits until Temporal shows no poll of the queue's
// task queue within PollerWindow.
func (o *stallOwner) awaitNoPollers(ctx context.Context) error {
	o.stopWorker()
	return harness.Poll(ctx, stallLimit, 50*time.Millisecond, func() error {
		tq, err := o.s.tc.DescribeTaskQueue(ctx, o.taskQueue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
		if err != nil {
			return err
		}
		for _, p := range tq.GetPollers() {
			if age := time.Since(p.GetLastAccessTime().AsTime()); age <= stallPollWindow {
				return fmt.Errorf("%s polled %v ago", p.GetIdentity(), age)
			}
		}
		return nil
	})
}

// send signals one request to the queue's run, as a producer does.
func (o *stallOwner) send(ctx context.Context) error {
	qs, ok := queueStatus(o.node, stallQueue)
	if !ok || qs.WorkflowID == "" {
		return fmt.Errorf("no run to send to: %+v", qs)
	}
	o.sent++
	return o.s.tc.SignalWorkflow(ctx, qs.WorkflowID, "", dispatcher.SignalDispatch, benchRequest(o.taskQueue, o.sent))
}

// await polls the Node's status until the queue's last progress report passes ok, and adds to r the
// causes other than cause it shows meanwhile.
func (o *stallOwner) await(ctx context.Context, cause progress.Cause, r *stallSamples, ok func(*progress.Report) bool) (baton.QueueStatus, error) {
	var qs baton.QueueStatus
	err := harness.Poll(ctx, stallLimit, 2*time.Millisecond, func() error {
		qs, _ = queueStatus(o.node, stallQueue)
		switch rep := qs.Progress; {
		case rep == nil:
			return fmt.Errorf("no progress report: %+v", qs)
		case ok(rep):
			return nil
		case rep.Stalled() && rep.Cause != cause && !slices.Contains(r.others, rep.Cause):
			r.others = append(r.others, rep.Cause)
		}
		return fmt.Errorf("progress: %+v", *qs.Progress)
	})
	return qs, err
}

// awaitHealthy waits until the Node leads the queue with an open run, judged by a check started after
// since to make progress and to hold nothing, and passes readiness.
func (o *stallOwner) awaitHealthy(ctx context.Context, since time.Time) error {
	return harness.Poll(ctx, stallLimit, 10*time.Millisecond, func() error {
		qs, _ := queueStatus(o.node, stallQueue)
		rep := qs.Progress
		switch {
		case !qs.Leading || !qs.DispatcherOpen || rep == nil || rep.CheckedAt.Before(since):
			return fmt.Errorf("not leading an open run checked since %v: %+v", since.Format(time.StampMilli), qs)
		case rep.Stalled() || rep.OldestPendingAge > 0 || rep.Progress != nil && rep.Progress.Waiting+rep.Progress.InFlight > 0:
			return fmt.Errorf("run not healthy and idle: %+v", *rep)
		}
		return o.node.Ready()
	})
}

// handlerGate is the dispatch handler, which blocks while the gate is held.
type handlerGate struct {
	mu   sync.Mutex
	held chan struct{} // closed on release; nil while not held
}

func (g *handlerGate) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held == nil {
		g.held = make(chan struct{})
	}
}

func (g *handlerGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
}

func (g *handlerGate) handle(ctx context.Context, _ string, _ dispatcher.Request, _ takeover.Owner) error {
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held == nil {
		return nil
	}
	select {
	case <-held:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

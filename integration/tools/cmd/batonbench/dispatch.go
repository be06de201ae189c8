package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mrand "math/rand/v2"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// The dispatch section's load: the producer (10 requests per second per queue at random
// times) doubled, for long enough to cross several takeovers, and bursts for the throughput rows.
const (
	dispatchRate        = 20.0 // requests per second per queue
	dispatchRest        = 10 * time.Second
	dispatchChaos       = 20 * time.Second
	dispatchTakeoverGap = 2500 * time.Millisecond // between two takeovers, alternately graceful and a leader loss
	dispatchBurst       = 1500                    // requests of the Baton signal throughput row
	dispatchUpdateBurst = 600                     // requests of the Baton Dispatch throughput row (10 in flight)
	dispatchNaiveBurst  = 200                     // requests of the naive throughput row (it handles ~20/s)
	dispatchSettle      = time.Minute             // how long the handling may take after the sending
	dispatchSendBound   = 30 * time.Second        // how long one Dispatch may retry
	dispatchLedger      = "/bench/dispatch"
	throughputTarget    = 200 // requests per second per queue

	naiveWorkflow = "bench.NaiveDispatcher"
	naiveActivity = "bench.NaiveDispatch"
)

// handledLog records, in process, when each dispatch key's handler first finished and how often.
type handledLog struct {
	mu    sync.Mutex
	first map[string]time.Time
	count map[string]int
	total int
}

func newHandledLog() *handledLog {
	return &handledLog{first: map[string]time.Time{}, count: map[string]int{}}
}

func (h *handledLog) handle(key string) {
	now := time.Now()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.count[key] == 0 {
		h.first[key] = now
	}
	h.count[key]++
	h.total++
}

func (h *handledLog) get(key string) (time.Time, int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.first[key], h.count[key]
}

func (h *handledLog) handled() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.total
}

// naiveDispatcher is the baseline: the reference dispatcher before Baton's dispatch work, in
// short. It handles one signal at a time with one activity each, and a run that is terminated takes
// what it accepted and did not handle with it.
func naiveDispatcher(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 30 * time.Second})
	ch := workflow.GetSignalChannel(ctx, dispatcher.SignalDispatch)
	for {
		var req dispatcher.Request
		ch.Receive(ctx, &req)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		_ = workflow.ExecuteActivity(ctx, naiveActivity, req.Key()).Get(ctx, nil)
	}
}

// sentReq is one request of a stream: its key, when it was sent, and whether the sender was told
// it is accepted (a signal) or handled (Dispatch), with the latter's instant.
type sentReq struct {
	key      string
	sent     time.Time
	accepted bool
	returned time.Time
}

// stream sends requests at rate per second (Poisson arrivals) until ctx ends, each in its own
// goroutine, and returns them once every send returned.
func stream(ctx context.Context, rate float64, name string, send func(context.Context, dispatcher.Request) error) []*sentReq {
	var out []*sentReq
	var wg sync.WaitGroup
	next := time.Now()
	for i := 0; ; i++ {
		next = next.Add(time.Duration(mrand.ExpFloat64() / rate * float64(time.Second)))
		if !sleepCtx(ctx, time.Until(next)) {
			break
		}
		req := benchRequest(name, i)
		r := &sentReq{key: req.Key(), sent: time.Now()}
		out = append(out, r)
		wg.Go(func() {
			// A send outlives the stream: Dispatch keeps trying across a handover for its bound.
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dispatchSendBound)
			defer cancel()
			if send(sctx, req) == nil {
				r.accepted, r.returned = true, time.Now()
			}
		})
	}
	wg.Wait()
	return out
}

func benchRequest(name string, i int) dispatcher.Request {
	return dispatcher.Request{Type: "bench", TaskID: fmt.Sprintf("%s-%d", name, i), PayloadSHA256: strings.Repeat("ab", 32)}
}

// benchDispatch measures Baton's dispatch path (the reference dispatcher with the etcd ledger,
// takeovers by real election terms) beside the naive baseline on the same Temporal server and at
// the same time: dispatch latency at rest and across takeovers, requests accepted but never handled
// and handled twice across the takeovers (from the ledger for Baton, from the handler for the
// naive workflow, which has none), and the throughput of one queue.
//
// Beside the reference dispatcher, an application-owned one (dispatcher.Serve after an announce
// activity, the shape a new user built) takes the same takeovers, and halfway through them the
// Temporal server restarts under every stream.
//
// A takeover here is in-process: two electors (node-a, node-b) own the Baton queue in turn; a
// graceful one resigns the leader's term, a leader loss revokes its etcd lease; the other node
// then campaigns and takes the dispatcher over (terminating the prior run by its run ID, carrying
// over its backlog). The naive queue's run is terminated and a new one started at the same
// instants, as the takeover before Baton did. The Temporal workers keep running throughout, so a
// crashed worker's held workflow task (the e2e chaos test's subject) is not part of these figures.
func benchDispatch(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	d := &dispatchRun{ctx: ctx, s: s, tc: s.tc, baton: newHandledLog(), naive: newHandledLog()}
	defer d.stopWorkers()
	if err := d.start(); err != nil {
		return nil, err
	}
	d.atRest()
	if err := d.acrossTakeovers(); err != nil {
		return nil, fmt.Errorf("takeovers: %w", err)
	}
	if err := d.throughput(); err != nil {
		return nil, err
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	defer watching.Wait()
	defer stopWatch()
	watching.Go(func() { d.ledgerWatch.Run(watchCtx) })
	if err := d.settle(); err != nil {
		return nil, err
	}
	return d.figures(), nil
}

// dispatchRun is one run of the dispatch section: what it started, what each phase sent, and what
// the handlers and the ledger say became of it.
type dispatchRun struct {
	ctx          context.Context
	s            *servers
	tc           client.Client
	baton, naive *handledLog // the handlers' calls: the reference and application-owned dispatchers', the naive one's
	workers      []worker.Worker
	nodes        []*node // take d-chaos (and the other reference queues) in turn
	appNodes     []*node // take d-own, whose takeover starts the application's workflow type
	chaosTerm    *election.Term
	ownTerm      *election.Term
	producer     *dispatcher.Producer
	// ledgerWatch reads the ledger's done puts from etcd's history once the loads are over, so that
	// no watch competes with them for the CPU.
	ledgerWatch *ledger.Watch

	restBaton, restNaive                             []*sentReq
	chaosDispatch, chaosSignal, chaosNaive, chaosOwn []*sentReq
	takeovers                                        int
	restart                                          time.Duration // the Temporal server's, halfway through the takeovers
	tputSignal, tputUpdate, tputNaive                float64
	dones                                            map[string][]ledger.Completion
}

func (d *dispatchRun) stopWorkers() {
	for _, w := range d.workers {
		w.Stop()
	}
}

// startWorker starts a Temporal worker of taskQueue with what register adds.
func (d *dispatchRun) startWorker(taskQueue string, register func(worker.Worker) error) error {
	w := worker.New(d.tc, taskQueue, worker.Options{})
	if err := register(w); err != nil {
		return err
	}
	d.workers = append(d.workers, w)
	return w.Start()
}

// start runs the dispatchers' workers, takes every Baton queue over and starts the naive runs.
func (d *dispatchRun) start() error {
	ctx, etcd := d.ctx, d.s.etcd
	dl, err := ledger.New(etcd, ledger.Config{Prefix: dispatchLedger, Retention: time.Hour})
	if err != nil {
		return err
	}
	acts := &dispatcher.Activities{Ledger: dl, History: d.tc,
		Handler: func(_ context.Context, key string, _ dispatcher.Request, _ takeover.Owner) error {
			d.baton.handle(key)
			return nil
		}}
	if d.nodes, err = d.s.nodes("node-a", "node-b"); err != nil {
		return err
	}
	// The application-owned dispatcher (dispatcher.Serve with an announce activity first), under the
	// same takeovers as d-chaos, by nodes whose takeovers start the application's workflow type.
	if d.appNodes, err = d.s.nodesWith(appTakeover(), "app-a", "app-b"); err != nil {
		return err
	}
	if err := d.startWorker(takeover.DefaultTaskQueue(benchProject, "d-own"), func(w worker.Worker) error {
		return registerApp(w, etcd, acts)
	}); err != nil {
		return err
	}
	if d.ownTerm, _, err = d.appNodes[0].take(ctx, "d-own"); err != nil {
		return err
	}
	for _, q := range []string{"d-rest", "d-chaos", "d-tput", "d-tput-update"} {
		if err := d.startWorker(takeover.DefaultTaskQueue(benchProject, q), func(w worker.Worker) error {
			dispatcher.Register(w, acts)
			return nil
		}); err != nil {
			return err
		}
		term, _, err := d.nodes[0].take(ctx, q)
		if err != nil {
			return err
		}
		if q == "d-chaos" {
			d.chaosTerm = term
		}
	}
	for _, q := range []string{"n-rest", "n-chaos", "n-tput"} {
		if err := d.startWorker(q, func(w worker.Worker) error {
			w.RegisterWorkflowWithOptions(naiveDispatcher, workflow.RegisterOptions{Name: naiveWorkflow})
			w.RegisterActivityWithOptions(func(_ context.Context, key string) error { d.naive.handle(key); return nil },
				activity.RegisterOptions{Name: naiveActivity})
			return nil
		}); err != nil {
			return err
		}
		if err := d.naiveStart(q); err != nil {
			return err
		}
	}
	if d.producer, err = dispatcher.NewProducer(d.tc, dispatcher.ProducerConfig{}); err != nil {
		return err
	}
	d.ledgerWatch, err = ledger.NewWatch(ctx, etcd, dispatchLedger, benchProject)
	return err
}

// naiveStart starts the naive run of q (Temporal refuses a same-ID start within ~1 s of the last).
func (d *dispatchRun) naiveStart(q string) error {
	return harness.Poll(d.ctx, 5*time.Second, 100*time.Millisecond, func() error {
		_, err := d.tc.ExecuteWorkflow(d.ctx, client.StartWorkflowOptions{ID: "naive-" + q, TaskQueue: q}, naiveWorkflow)
		return err
	})
}

// dispatch sends through the Producer to Baton queue q.
func (d *dispatchRun) dispatch(q string) func(context.Context, dispatcher.Request) error {
	return func(ctx context.Context, req dispatcher.Request) error {
		_, err := d.producer.Dispatch(ctx, benchProject, q, req)
		return err
	}
}

// signalOnce sends one dispatch signal to the workflow id, fire and forget.
func (d *dispatchRun) signalOnce(id string) func(context.Context, dispatcher.Request) error {
	return func(ctx context.Context, req dispatcher.Request) error {
		return d.tc.SignalWorkflow(ctx, id, "", dispatcher.SignalDispatch, req)
	}
}

func batonID(q string) string { id, _ := takeover.WorkflowID(benchProject, q); return id }

// atRest streams to a Baton queue and a naive one, with no fault.
func (d *dispatchRun) atRest() {
	fmt.Printf("batonbench: dispatch: at rest, %v/s for %v on each queue\n", dispatchRate, dispatchRest)
	parallel(d.ctx, dispatchRest,
		func(c context.Context) { d.restBaton = stream(c, dispatchRate, "rest-dispatch", d.dispatch("d-rest")) },
		func(c context.Context) {
			d.restNaive = stream(c, dispatchRate, "rest-naive", d.signalOnce("naive-n-rest"))
		})
}

// acrossTakeovers streams to the reference, application-owned and naive dispatchers while their
// queues are taken over every dispatchTakeoverGap, and the Temporal server restarts halfway.
func (d *dispatchRun) acrossTakeovers() error {
	d.takeovers = int(dispatchChaos / dispatchTakeoverGap)
	fmt.Printf("batonbench: dispatch: %d takeovers (graceful and leader loss alternately) and a Temporal restart in %v at %v/s\n",
		d.takeovers, dispatchChaos, dispatchRate)
	var err error
	parallel(d.ctx, dispatchChaos,
		func(c context.Context) {
			d.chaosDispatch = stream(c, dispatchRate, "chaos-dispatch", d.dispatch("d-chaos"))
		},
		func(c context.Context) { d.chaosOwn = stream(c, dispatchRate, "chaos-own", d.dispatch("d-own")) },
		func(c context.Context) {
			d.chaosSignal = stream(c, dispatchRate, "chaos-signal", d.signalOnce(batonID("d-chaos")))
		},
		func(c context.Context) {
			d.chaosNaive = stream(c, dispatchRate, "chaos-naive", d.signalOnce("naive-n-chaos"))
		},
		func(c context.Context) {
			term, own := d.chaosTerm, d.ownTerm
			for k := 0; k < d.takeovers && err == nil && sleepCtx(c, dispatchTakeoverGap); k++ {
				term, own, err = d.takeoverRound(k, term, own)
			}
		})
	return err
}

// takeoverRound is the k-th takeover: halfway, a Temporal restart first; then the leaders of
// d-chaos and d-own resign (even k) or lose their lease (odd k), the naive run is terminated and
// started again, and the other node takes each Baton queue over. It returns the new terms.
func (d *dispatchRun) takeoverRound(k int, term, own *election.Term) (*election.Term, *election.Term, error) {
	ctx := d.ctx
	if k == d.takeovers/2 {
		began := time.Now()
		if err := d.s.temporal.Restart(ctx); err != nil {
			return nil, nil, err
		}
		d.restart = time.Since(began)
	}
	for _, t := range []*election.Term{term, own} {
		lose := t.Resign
		if k%2 == 1 {
			lose = func(ctx context.Context) error { return revokeLeaseOf(ctx, d.s.etcd, t.Key()) }
		}
		if err := lose(ctx); err != nil {
			return nil, nil, err
		}
	}
	// The naive takeover of the same instant: terminate the run, start another.
	if err := d.tc.TerminateWorkflow(ctx, "naive-n-chaos", "", "bench takeover"); err != nil {
		return nil, nil, err
	}
	if err := d.naiveStart("n-chaos"); err != nil {
		return nil, nil, err
	}
	// node-b takes the first takeover, node-a the second, and so on.
	term, _, err := d.nodes[(k+1)%2].take(ctx, "d-chaos")
	if err != nil {
		return nil, nil, err
	}
	own, _, err = d.appNodes[(k+1)%2].take(ctx, "d-own")
	return term, own, err
}

// throughput measures bursts sent at once to one queue each: Baton signals, Baton Dispatch calls
// (10 in flight: history.maxInFlightUpdates) and naive signals.
func (d *dispatchRun) throughput() error {
	fmt.Printf("batonbench: dispatch: throughput, bursts of %d signals and %d Dispatch calls (Baton), %d signals (naive)\n",
		dispatchBurst, dispatchUpdateBurst, dispatchNaiveBurst)
	var err error
	if d.tputSignal, err = d.burst(dispatchBurst, "tput-signal", d.signalOnce(batonID("d-tput")), d.baton, 64); err != nil {
		return err
	}
	if d.tputUpdate, err = d.burst(dispatchUpdateBurst, "tput-dispatch", d.dispatch("d-tput-update"), d.baton, 10); err != nil {
		return err
	}
	d.tputNaive, err = d.burst(dispatchNaiveBurst, "tput-naive", d.signalOnce("naive-n-tput"), d.naive, 64)
	return err
}

// burst sends n requests at once, conc in flight, and returns the rate from the first send to the
// last handled. A send that fails (its bound ended on a swamped machine) is counted, not fatal: the
// rate is of the requests handled, up to the last one handled.
func (d *dispatchRun) burst(n int, name string, send func(context.Context, dispatcher.Request) error, log *handledLog, conc int) (float64, error) {
	ctx := d.ctx
	began := time.Now()
	before := log.handled()
	var failed atomic.Int64
	_ = harness.Parallel(ctx, n, conc, func(ctx context.Context, i int) error {
		sctx, cancel := context.WithTimeout(ctx, dispatchSendBound)
		defer cancel()
		if send(sctx, benchRequest(name, i)) != nil {
			failed.Add(1)
		}
		return nil
	})
	want := n - int(failed.Load())
	last, lastAt := log.handled()-before, time.Now()
	for deadline := time.Now().Add(dispatchSettle); last < want && time.Now().Before(deadline); sleepCtx(ctx, 5*time.Millisecond) {
		if got := log.handled() - before; got != last {
			last, lastAt = got, time.Now()
		}
	}
	if f := failed.Load(); f > 0 || last < n {
		fmt.Printf("batonbench: dispatch: %s: %d of %d sends failed, %d handled\n", name, f, n, last)
	}
	if last == 0 {
		return 0, fmt.Errorf("%s: nothing handled", name)
	}
	return float64(last) / lastAt.Sub(began).Seconds(), nil
}

// settle waits (up to dispatchSettle) until the ledger's history shows every request the Baton
// dispatchers accepted across the takeovers done, and for the naive queue to be quiet: its losses
// are final then, its terminated runs are gone.
func (d *dispatchRun) settle() error {
	ctx := d.ctx
	chaosBaton := d.chaosBaton()
	for deadline := time.Now().Add(dispatchSettle); ; sleepCtx(ctx, 200*time.Millisecond) {
		now, err := d.s.etcd.Get(ctx, ledger.Range(dispatchLedger, benchProject), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return err
		}
		wctx, cancel := context.WithTimeout(ctx, dispatchSettle)
		err = d.ledgerWatch.WaitFor(wctx, now.Header.Revision)
		cancel()
		if err != nil {
			return err
		}
		d.dones, _ = d.ledgerWatch.Seen()
		if _, missing, _ := tally(chaosBaton, d.inLedger); missing == 0 || time.Now().After(deadline) {
			break
		}
	}
	for last, quietSince := d.naive.handled(), time.Now(); time.Since(quietSince) < 2*time.Second; sleepCtx(ctx, 100*time.Millisecond) {
		if n := d.naive.handled(); n != last {
			last, quietSince = n, time.Now()
		}
	}
	return nil
}

func (d *dispatchRun) chaosBaton() []*sentReq {
	return append(append(slices.Clone(d.chaosDispatch), d.chaosSignal...), d.chaosOwn...)
}

// inLedger is how many done puts the ledger's history has for key.
func (d *dispatchRun) inLedger(key string) int { return len(d.dones[key]) }

// tally counts the accepted requests of rs, and those of them that times says were handled never
// and more than once.
func tally(rs []*sentReq, times func(key string) int) (accepted int, lost, twice float64) {
	for _, r := range rs {
		if !r.accepted {
			continue
		}
		accepted++
		if n := times(r.key); n == 0 {
			lost++
		} else if n > 1 {
			twice++
		}
	}
	return accepted, lost, twice
}

// latency is, for each accepted request that done says was done, the time from its send to then.
func latency(rs []*sentReq, done func(r *sentReq) (time.Time, bool)) []float64 {
	var out []float64
	for _, r := range rs {
		if at, ok := done(r); r.accepted && ok {
			out = append(out, benchreport.Ms(at.Sub(r.sent)))
		}
	}
	return out
}

func returned(r *sentReq) (time.Time, bool) { return r.returned, true }

func handledBy(log *handledLog) func(r *sentReq) (time.Time, bool) {
	return func(r *sentReq) (time.Time, bool) { at, c := log.get(r.key); return at, c > 0 }
}

// undecided counts the Dispatch calls of rs that were still retrying when their bound ended (rs
// less its accepted), and how many of them the ledger shows handled anyway.
func (d *dispatchRun) undecided(rs []*sentReq, accepted int) (int, int) {
	done := 0
	for _, r := range rs {
		if !r.accepted && d.inLedger(r.key) > 0 {
			done++
		}
	}
	return len(rs) - accepted, done
}

// parallel runs each function with a context that ends after d (or with ctx), and waits for all.
func parallel(ctx context.Context, d time.Duration, fs ...func(context.Context)) {
	c, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var wg sync.WaitGroup
	for _, f := range fs {
		wg.Go(func() { f(c) })
	}
	wg.Wait()
}

// revokeLeaseOf revokes the etcd lease holding key: its owner's session is gone at once, as when the
// process died and its lease expired.
func revokeLeaseOf(ctx context.Context, cli *clientv3.Client, key string) error {
	resp, err := cli.Get(ctx, key)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return fmt.Errorf("leader key %s is gone", key)
	}
	_, err = cli.Revoke(ctx, clientv3.LeaseID(resp.Kvs[0].Lease))
	return err
}

func sleepCtx(ctx context.Context, d time.Duration) bool { return clock.Sleep(ctx, clock.Real(), d) }

// figures tallies what each phase sent against the ledger and the handlers, prints the counts, and
// returns the section's figures.
func (d *dispatchRun) figures() []benchreport.Figure {
	accRest, _, _ := tally(d.restBaton, d.inLedger) // only the count accepted
	accD, lostD, twiceD := tally(d.chaosDispatch, d.inLedger)
	accS, lostS, twiceS := tally(d.chaosSignal, d.inLedger)
	accO, lostO, twiceO := tally(d.chaosOwn, d.inLedger)
	_, _, handlerTwice := tally(d.chaosBaton(), func(k string) int { _, c := d.baton.get(k); return c })
	accN, lostN, twiceN := tally(d.chaosNaive, func(k string) int { _, c := d.naive.get(k); return c })
	undecided, undecidedDone := d.undecided(d.chaosDispatch, accD)
	undecidedOwn, undecidedOwnDone := d.undecided(d.chaosOwn, accO)
	fmt.Printf("batonbench: dispatch: across takeovers: %d Dispatch calls had not returned after %v; the ledger shows %d of them handled\n",
		undecided, dispatchSendBound, undecidedDone)
	fmt.Printf("batonbench: dispatch: across takeovers: Baton Dispatch %d sent, %d handled (returned), %v lost, %v twice; "+
		"Baton signal %d sent, %d accepted, %v lost, %v twice; naive signal %d sent, %d accepted, %v lost, %v twice\n",
		len(d.chaosDispatch), accD, lostD, twiceD, len(d.chaosSignal), accS, lostS, twiceS, len(d.chaosNaive), accN, lostN, twiceN)
	fmt.Printf("batonbench: dispatch: across takeovers: application-owned dispatcher (Serve): Dispatch %d sent, %d handled (returned), "+
		"%v lost, %v twice, %d not returned within %v (the ledger shows %d of them handled); the Temporal restart took %v\n",
		len(d.chaosOwn), accO, lostO, twiceO, undecidedOwn, dispatchSendBound, undecidedOwnDone, d.restart.Round(time.Millisecond))

	const naiveSignal = "naive signal, one-at-a-time workflow (send -> handled)"
	chaos, info := fmt.Sprintf("across %d takeovers (graceful + leader loss) and a Temporal restart", d.takeovers), benchreport.Informational
	const refDispatch = "reference dispatcher, Baton Dispatch, same takeovers"
	naiveLost := fmt.Sprintf("naive signal sent once (of %d accepted)", accN)
	naiveTput, tputTarget := fmt.Sprintf("naive workflow, %d signals", dispatchNaiveBurst), fmt.Sprintf(">= %d req/s", throughputTarget)
	return []benchreport.Figure{
		benchreport.NewFigure(fmt.Sprintf("dispatch latency at rest, Baton Dispatch (send -> returned handled; %d of %d returned within %v)",
			accRest, len(d.restBaton), dispatchSendBound), "ms",
			latency(d.restBaton, returned), naiveSignal, latency(d.restNaive, handledBy(d.naive)), "informational", info),
		benchreport.NewFigure(fmt.Sprintf("dispatch latency %s, Baton Dispatch (send -> returned handled; %d of %d returned within %v)",
			chaos, accD, len(d.chaosDispatch), dispatchSendBound), "ms",
			latency(d.chaosDispatch, returned), naiveSignal+", handled ones", latency(d.chaosNaive, handledBy(d.naive)), "informational", info),
		benchreport.NewFigure("dispatch latency "+chaos+", Baton with fire-and-forget signals (send -> handled)", "ms",
			latency(d.chaosSignal, handledBy(d.baton)), naiveSignal+", handled ones", latency(d.chaosNaive, handledBy(d.naive)), "informational", info),
		benchreport.Single(fmt.Sprintf("accepted but never handled %s, Baton Dispatch (of %d)", chaos, accD), "requests",
			lostD, naiveLost, lostN, "0", lostD == 0),
		benchreport.Single(fmt.Sprintf("Dispatch calls not returned within %v %s, Baton (of %d sent; the ledger shows %d of them handled)",
			dispatchSendBound, chaos, len(d.chaosDispatch), undecidedDone), "requests", float64(undecided),
			fmt.Sprintf("naive signal sends refused (of %d sent)", len(d.chaosNaive)), float64(len(d.chaosNaive)-accN), "informational", true),
		benchreport.Single(fmt.Sprintf("accepted but never handled %s, Baton signal sent once (of %d)", chaos, accS), "requests",
			lostS, naiveLost, lostN, "0", lostS == 0),
		benchreport.Single(fmt.Sprintf("handled twice (ledger done twice) %s, Baton Dispatch + signals", chaos), "requests",
			twiceD+twiceS, "naive signal sent once (handler ran twice)", twiceN, "0", twiceD+twiceS == 0),
		benchreport.Single(fmt.Sprintf("handler ran twice %s, Baton Dispatch + signals (at-least-once between ledger Begin and Complete)", chaos), "requests",
			handlerTwice, "naive signal sent once (handler ran twice)", twiceN, "informational", true),
		benchreport.NewFigure(fmt.Sprintf("dispatch latency %s, application-owned dispatcher (dispatcher.Serve after an announce activity; send -> returned handled; %d of %d returned within %v)",
			chaos, accO, len(d.chaosOwn), dispatchSendBound), "ms",
			latency(d.chaosOwn, returned), refDispatch, latency(d.chaosDispatch, returned), "informational", info),
		benchreport.Single(fmt.Sprintf("accepted but never handled %s, application-owned dispatcher (of %d)", chaos, accO), "requests",
			lostO, refDispatch, lostD, "0", lostO == 0),
		benchreport.Single(fmt.Sprintf("handled twice (ledger done twice) %s, application-owned dispatcher", chaos), "requests",
			twiceO, refDispatch, twiceD, "0", twiceO == 0),
		benchreport.Single(fmt.Sprintf("Dispatch calls not returned within %v %s, application-owned dispatcher (of %d sent; the ledger shows %d of them handled)",
			dispatchSendBound, chaos, len(d.chaosOwn), undecidedOwnDone), "requests", float64(undecidedOwn),
			refDispatch, float64(undecided), "0", undecidedOwn == 0),
		benchreport.Single(fmt.Sprintf("throughput of one queue, Baton, %d fire-and-forget signals (with the etcd ledger)", dispatchBurst), "req/s",
			d.tputSignal, naiveTput, d.tputNaive, tputTarget, d.tputSignal >= throughputTarget),
		benchreport.Single(fmt.Sprintf("throughput of one queue, Baton Dispatch, %d requests, 10 in flight (the server's update limit)", dispatchUpdateBurst), "req/s",
			d.tputUpdate, naiveTput, d.tputNaive, tputTarget, d.tputUpdate >= throughputTarget),
	}
}

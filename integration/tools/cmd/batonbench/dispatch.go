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
func benchDispatch(ctx context.Context, s *servers, o options) ([]benchreport.Figure, error) {
	tc := s.tc
	ledger, err := dispatcher.NewEtcdLedger(s.etcd, dispatchLedger, time.Hour)
	if err != nil {
		return nil, err
	}
	baton, naive := newHandledLog(), newHandledLog()
	acts := &dispatcher.Activities{Ledger: ledger, History: tc,
		Handler: func(_ context.Context, key string, _ dispatcher.Request, _ takeover.Owner) error {
			baton.handle(key)
			return nil
		}}
	var workers []worker.Worker
	defer func() {
		for _, w := range workers {
			w.Stop()
		}
	}()
	nodes, err := s.nodes("node-a", "node-b")
	if err != nil {
		return nil, err
	}
	var chaosTerm, ownTerm *election.Term
	// The application-owned dispatcher (dispatcher.Serve with an announce activity first), under the
	// same takeovers as d-chaos, by nodes whose takeovers start the application's workflow type.
	appNodes, err := s.nodesWith(appTakeover(), "app-a", "app-b")
	if err != nil {
		return nil, err
	}
	{
		w := worker.New(tc, takeover.DefaultTaskQueue(benchProject, "d-own"), worker.Options{})
		if err := registerApp(w, s.etcd, acts); err != nil {
			return nil, err
		}
		workers = append(workers, w)
		if err := w.Start(); err != nil {
			return nil, err
		}
		if ownTerm, _, err = appNodes[0].take(ctx, "d-own"); err != nil {
			return nil, err
		}
	}
	for _, q := range []string{"d-rest", "d-chaos", "d-tput", "d-tput-update"} {
		w := worker.New(tc, takeover.DefaultTaskQueue(benchProject, q), worker.Options{})
		dispatcher.Register(w, acts)
		workers = append(workers, w)
		if err := w.Start(); err != nil {
			return nil, err
		}
		term, _, err := nodes[0].take(ctx, q)
		if err != nil {
			return nil, err
		}
		if q == "d-chaos" {
			chaosTerm = term
		}
	}
	naiveStart := func(q string) error { // Temporal refuses a same-ID start within ~1 s of the last
		return harness.Poll(ctx, 5*time.Second, 100*time.Millisecond, func() error {
			_, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "naive-" + q, TaskQueue: q}, naiveWorkflow)
			return err
		})
	}
	for _, q := range []string{"n-rest", "n-chaos", "n-tput"} {
		w := worker.New(tc, q, worker.Options{})
		w.RegisterWorkflowWithOptions(naiveDispatcher, workflow.RegisterOptions{Name: naiveWorkflow})
		w.RegisterActivityWithOptions(func(_ context.Context, key string) error { naive.handle(key); return nil },
			activity.RegisterOptions{Name: naiveActivity})
		workers = append(workers, w)
		if err := w.Start(); err != nil {
			return nil, err
		}
		if err := naiveStart(q); err != nil {
			return nil, err
		}
	}
	producer, err := dispatcher.NewProducer(tc, dispatcher.ProducerConfig{})
	if err != nil {
		return nil, err
	}
	dispatch := func(q string) func(context.Context, dispatcher.Request) error {
		return func(ctx context.Context, req dispatcher.Request) error {
			_, err := producer.Dispatch(ctx, benchProject, q, req)
			return err
		}
	}
	signalOnce := func(id string) func(context.Context, dispatcher.Request) error {
		return func(ctx context.Context, req dispatcher.Request) error {
			return tc.SignalWorkflow(ctx, id, "", dispatcher.SignalDispatch, req)
		}
	}
	batonID := func(q string) string { id, _ := takeover.WorkflowID(benchProject, q); return id }
	// The ledger's revision before the first request: its done puts since are read from etcd's
	// history once the loads are over, so that no watch competes with them for the CPU.
	ledgerWatch, err := dispatcher.NewLedgerWatch(ctx, s.etcd, dispatchLedger)
	if err != nil {
		return nil, err
	}

	// At rest.
	fmt.Printf("batonbench: dispatch: at rest, %v/s for %v on each queue\n", dispatchRate, dispatchRest)
	var restBaton, restNaive []*sentReq
	parallel(ctx, dispatchRest,
		func(c context.Context) { restBaton = stream(c, dispatchRate, "rest-dispatch", dispatch("d-rest")) },
		func(c context.Context) { restNaive = stream(c, dispatchRate, "rest-naive", signalOnce("naive-n-rest")) })

	// Across takeovers, and a restart of the Temporal server halfway.
	takeovers := int(dispatchChaos / dispatchTakeoverGap)
	fmt.Printf("batonbench: dispatch: %d takeovers (graceful and leader loss alternately) and a Temporal restart in %v at %v/s\n",
		takeovers, dispatchChaos, dispatchRate)
	var chaosDispatch, chaosSignal, chaosNaive, chaosOwn []*sentReq
	var chaosErr error
	var restart time.Duration
	parallel(ctx, dispatchChaos,
		func(c context.Context) {
			chaosDispatch = stream(c, dispatchRate, "chaos-dispatch", dispatch("d-chaos"))
		},
		func(c context.Context) {
			chaosOwn = stream(c, dispatchRate, "chaos-own", dispatch("d-own"))
		},
		func(c context.Context) {
			chaosSignal = stream(c, dispatchRate, "chaos-signal", signalOnce(batonID("d-chaos")))
		},
		func(c context.Context) {
			chaosNaive = stream(c, dispatchRate, "chaos-naive", signalOnce("naive-n-chaos"))
		},
		func(c context.Context) {
			term, own := chaosTerm, ownTerm
			for k := 0; k < takeovers && chaosErr == nil && sleepCtx(c, dispatchTakeoverGap); k++ {
				if k == takeovers/2 {
					began := time.Now()
					if chaosErr = s.temporal.Restart(ctx); chaosErr != nil {
						break
					}
					restart = time.Since(began)
				}
				for _, t := range []*election.Term{term, own} {
					if chaosErr == nil && k%2 == 0 {
						chaosErr = t.Resign(ctx)
					} else if chaosErr == nil {
						chaosErr = revokeLeaseOf(ctx, s.etcd, t.Key())
					}
				}
				// The naive takeover of the same instant: terminate the run, start another.
				if chaosErr == nil {
					chaosErr = tc.TerminateWorkflow(ctx, "naive-n-chaos", "", "bench takeover")
				}
				if chaosErr == nil {
					chaosErr = naiveStart("n-chaos")
				}
				if chaosErr == nil { // node-b takes the first takeover, node-a the second, and so on
					term, _, chaosErr = nodes[(k+1)%2].take(ctx, "d-chaos")
				}
				if chaosErr == nil {
					own, _, chaosErr = appNodes[(k+1)%2].take(ctx, "d-own")
				}
			}
		})
	if chaosErr != nil {
		return nil, fmt.Errorf("takeovers: %w", chaosErr)
	}

	// Throughput of one queue: a burst sent at once, from the first send to the last handled.
	fmt.Printf("batonbench: dispatch: throughput, bursts of %d signals and %d Dispatch calls (Baton), %d signals (naive)\n",
		dispatchBurst, dispatchUpdateBurst, dispatchNaiveBurst)
	// A send that fails (its bound ended on a swamped machine) is counted, not fatal: the rate is
	// of the requests handled, up to the last one handled.
	burst := func(n int, name string, send func(context.Context, dispatcher.Request) error, log *handledLog, conc int) (float64, error) {
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
	tputSignal, err := burst(dispatchBurst, "tput-signal", signalOnce(batonID("d-tput")), baton, 64)
	if err != nil {
		return nil, err
	}
	tputUpdate, err := burst(dispatchUpdateBurst, "tput-dispatch", dispatch("d-tput-update"), baton, 10) // history.maxInFlightUpdates
	if err != nil {
		return nil, err
	}
	tputNaive, err := burst(dispatchNaiveBurst, "tput-naive", signalOnce("naive-n-tput"), naive, 64)
	if err != nil {
		return nil, err
	}

	// Loss and double execution across the takeovers: Baton's from the ledger (every done put since
	// the section began), the naive workflow's from its handler calls. tally counts the accepted
	// requests of rs, and those of them that times says were handled never and more than once.
	tally := func(rs []*sentReq, times func(key string) int) (accepted int, lost, twice float64) {
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
	watchCtx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	defer watching.Wait()
	defer stopWatch()
	watching.Go(func() { ledgerWatch.Run(watchCtx) })
	chaosBaton := append(append(slices.Clone(chaosDispatch), chaosSignal...), chaosOwn...)
	var dones map[string][]dispatcher.LedgerCompletion
	inLedger := func(k string) int { return len(dones[k]) }
	for deadline := time.Now().Add(dispatchSettle); ; sleepCtx(ctx, 200*time.Millisecond) {
		now, err := s.etcd.Get(ctx, dispatcher.LedgerRange(dispatchLedger), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, dispatchSettle)
		err = ledgerWatch.WaitFor(wctx, now.Header.Revision)
		cancel()
		if err != nil {
			return nil, err
		}
		dones, _ = ledgerWatch.Seen()
		if _, missing, _ := tally(chaosBaton, inLedger); missing == 0 || time.Now().After(deadline) {
			break
		}
	}
	accRest, _, _ := tally(restBaton, inLedger) // only the count accepted
	accD, lostD, twiceD := tally(chaosDispatch, inLedger)
	accS, lostS, twiceS := tally(chaosSignal, inLedger)
	accO, lostO, twiceO := tally(chaosOwn, inLedger)
	_, _, handlerTwice := tally(chaosBaton, func(k string) int { _, c := baton.get(k); return c })
	// The naive workflow's losses are final once the queue is quiet: its terminated runs are gone.
	for last, quietSince := naive.handled(), time.Now(); time.Since(quietSince) < 2*time.Second; sleepCtx(ctx, 100*time.Millisecond) {
		if n := naive.handled(); n != last {
			last, quietSince = n, time.Now()
		}
	}
	accN, lostN, twiceN := tally(chaosNaive, func(k string) int { _, c := naive.get(k); return c })

	// latency is, for each accepted request that done says was done, the time from its send to then.
	latency := func(rs []*sentReq, done func(r *sentReq) (time.Time, bool)) []float64 {
		var out []float64
		for _, r := range rs {
			if at, ok := done(r); r.accepted && ok {
				out = append(out, benchreport.Ms(at.Sub(r.sent)))
			}
		}
		return out
	}
	returned := func(r *sentReq) (time.Time, bool) { return r.returned, true }
	handledBy := func(log *handledLog) func(r *sentReq) (time.Time, bool) {
		return func(r *sentReq) (time.Time, bool) { at, c := log.get(r.key); return at, c > 0 }
	}
	// A Dispatch still retrying when its bound ended is undecided for its sender; the ledger says
	// whether the request was handled anyway.
	undecidedOf := func(rs []*sentReq, accepted int) (int, int) {
		done := 0
		for _, r := range rs {
			if !r.accepted && inLedger(r.key) > 0 {
				done++
			}
		}
		return len(rs) - accepted, done
	}
	undecided, undecidedDone := undecidedOf(chaosDispatch, accD)
	undecidedOwn, undecidedOwnDone := undecidedOf(chaosOwn, accO)
	fmt.Printf("batonbench: dispatch: across takeovers: %d Dispatch calls had not returned after %v; the ledger shows %d of them handled\n",
		undecided, dispatchSendBound, undecidedDone)
	fmt.Printf("batonbench: dispatch: across takeovers: Baton Dispatch %d sent, %d handled (returned), %v lost, %v twice; "+
		"Baton signal %d sent, %d accepted, %v lost, %v twice; naive signal %d sent, %d accepted, %v lost, %v twice\n",
		len(chaosDispatch), accD, lostD, twiceD, len(chaosSignal), accS, lostS, twiceS, len(chaosNaive), accN, lostN, twiceN)
	fmt.Printf("batonbench: dispatch: across takeovers: application-owned dispatcher (Serve): Dispatch %d sent, %d handled (returned), "+
		"%v lost, %v twice, %d not returned within %v (the ledger shows %d of them handled); the Temporal restart took %v\n",
		len(chaosOwn), accO, lostO, twiceO, undecidedOwn, dispatchSendBound, undecidedOwnDone, restart.Round(time.Millisecond))

	const naiveSignal = "naive signal, one-at-a-time workflow (send -> handled)"
	chaos, info := fmt.Sprintf("across %d takeovers (graceful + leader loss) and a Temporal restart", takeovers), benchreport.Informational
	const refDispatch = "reference dispatcher, Baton Dispatch, same takeovers"
	naiveLost := fmt.Sprintf("naive signal sent once (of %d accepted)", accN)
	naiveTput, tputTarget := fmt.Sprintf("naive workflow, %d signals", dispatchNaiveBurst), fmt.Sprintf(">= %d req/s", throughputTarget)
	return []benchreport.Figure{
		benchreport.NewFigure(fmt.Sprintf("dispatch latency at rest, Baton Dispatch (send -> returned handled; %d of %d returned within %v)",
			accRest, len(restBaton), dispatchSendBound), "ms",
			latency(restBaton, returned), naiveSignal, latency(restNaive, handledBy(naive)), "informational", info),
		benchreport.NewFigure(fmt.Sprintf("dispatch latency %s, Baton Dispatch (send -> returned handled; %d of %d returned within %v)",
			chaos, accD, len(chaosDispatch), dispatchSendBound), "ms",
			latency(chaosDispatch, returned), naiveSignal+", handled ones", latency(chaosNaive, handledBy(naive)), "informational", info),
		benchreport.NewFigure("dispatch latency "+chaos+", Baton with fire-and-forget signals (send -> handled)", "ms",
			latency(chaosSignal, handledBy(baton)), naiveSignal+", handled ones", latency(chaosNaive, handledBy(naive)), "informational", info),
		benchreport.Single(fmt.Sprintf("accepted but never handled %s, Baton Dispatch (of %d)", chaos, accD), "requests",
			lostD, naiveLost, lostN, "0", lostD == 0),
		benchreport.Single(fmt.Sprintf("Dispatch calls not returned within %v %s, Baton (of %d sent; the ledger shows %d of them handled)",
			dispatchSendBound, chaos, len(chaosDispatch), undecidedDone), "requests", float64(undecided),
			fmt.Sprintf("naive signal sends refused (of %d sent)", len(chaosNaive)), float64(len(chaosNaive)-accN), "informational", true),
		benchreport.Single(fmt.Sprintf("accepted but never handled %s, Baton signal sent once (of %d)", chaos, accS), "requests",
			lostS, naiveLost, lostN, "0", lostS == 0),
		benchreport.Single(fmt.Sprintf("handled twice (ledger done twice) %s, Baton Dispatch + signals", chaos), "requests",
			twiceD+twiceS, "naive signal sent once (handler ran twice)", twiceN, "0", twiceD+twiceS == 0),
		benchreport.Single(fmt.Sprintf("handler ran twice %s, Baton Dispatch + signals (at-least-once between ledger Begin and Complete)", chaos), "requests",
			handlerTwice, "naive signal sent once (handler ran twice)", twiceN, "informational", true),
		benchreport.NewFigure(fmt.Sprintf("dispatch latency %s, application-owned dispatcher (dispatcher.Serve after an announce activity; send -> returned handled; %d of %d returned within %v)",
			chaos, accO, len(chaosOwn), dispatchSendBound), "ms",
			latency(chaosOwn, returned), refDispatch, latency(chaosDispatch, returned), "informational", info),
		benchreport.Single(fmt.Sprintf("accepted but never handled %s, application-owned dispatcher (of %d)", chaos, accO), "requests",
			lostO, refDispatch, lostD, "0", lostO == 0),
		benchreport.Single(fmt.Sprintf("handled twice (ledger done twice) %s, application-owned dispatcher", chaos), "requests",
			twiceO, refDispatch, twiceD, "0", twiceO == 0),
		benchreport.Single(fmt.Sprintf("Dispatch calls not returned within %v %s, application-owned dispatcher (of %d sent; the ledger shows %d of them handled)",
			dispatchSendBound, chaos, len(chaosOwn), undecidedOwnDone), "requests", float64(undecidedOwn),
			refDispatch, float64(undecided), "0", undecidedOwn == 0),
		benchreport.Single(fmt.Sprintf("throughput of one queue, Baton, %d fire-and-forget signals (with the etcd ledger)", dispatchBurst), "req/s",
			tputSignal, naiveTput, tputNaive, tputTarget, tputSignal >= throughputTarget),
		benchreport.Single(fmt.Sprintf("throughput of one queue, Baton Dispatch, %d requests, 10 in flight (the server's update limit)", dispatchUpdateBurst), "req/s",
			tputUpdate, naiveTput, tputNaive, tputTarget, tputUpdate >= throughputTarget),
	}, nil
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

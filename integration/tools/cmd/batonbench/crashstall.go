package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// The worker crash section: three demo-worker processes serve two queues at an election TTL of 3 s
// while the bench sends a steady stream of requests to both; crashRoundKinds says which worker each
// round SIGKILLs.
const (
	crashStallTTL       = 3 * time.Second
	crashStallRate      = 20.0 // requests per second per queue
	crashStallRest      = 10 * time.Second
	crashStallGap       = 10 * time.Second // between two crashes: the takeover, a new process, calm
	crashStallSettle    = time.Minute      // how long the handling may take after the sending
	crashStallProject   = "crash-stall"
	crashStallNonLeader = "non-leader"
	crashStallLeader    = "leader"
)

// crashRoundKinds are the crash rounds in order: a worker that holds a run's workflow tasks (its
// sticky cache) without leading its queue, then a queue's leader, twice.
var crashRoundKinds = []string{crashStallNonLeader, crashStallLeader, crashStallNonLeader, crashStallLeader}

// crashRound is one SIGKILL: when, of whom, and the queues whose requests it may delay (for a
// non-leader, the queues it did not lead; for a leader, its queue).
type crashRound struct {
	kind   string
	victim string
	queues []string
	at     time.Time
}

// crashFleet is the section's demo-worker processes and what it needs to judge them.
type crashFleet struct {
	s      *servers
	bin    string
	env    []string
	queues []string
	procs  []*workerproc.Proc
	next   int
}

// benchCrashStall measures what a worker's crash costs the requests of queues it may not lead: every
// worker polls every queue's dispatcher task queue, so a run's workflow tasks (and its sticky cache)
// can sit on any worker, and a SIGKILLed one held them for Temporal's workflow task timeout (10 s) or
// the SDK's sticky timeout (5 s) before Baton set both (takeover.Config.WorkflowTaskTimeout,
// dispatcher.WorkerOptions). The figure is send -> handled (the bench's signal, accepted by
// Temporal, to the etcd ledger's done record as a watch sees it) across the crashes, beside the same
// stream at rest; a leader's crash costs the TTL (the successor carries the run's requests over).
func benchCrashStall(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	bin, err := workerproc.Build()
	if err != nil {
		return nil, err
	}
	f := &crashFleet{s: s, bin: bin, queues: []string{"c1", "c2"}, env: []string{
		"BATON_ETCD_ENDPOINTS=" + strings.Join(s.cluster.Endpoints(), ","),
		"BATON_TEMPORAL_ADDRESS=" + s.temporal.HostPort(), "BATON_TEMPORAL_NAMESPACE=" + s.temporal.Namespace(),
		"BATON_REDIS_ADDR=" + s.rdb.Options().Addr,
		"BATON_PROJECT=" + crashStallProject, "BATON_QUEUES=c1,c2", "BATON_ELECTION_TTL=" + crashStallTTL.String(),
		"BATON_HEARTBEAT_INTERVAL=1s", "BATON_REGISTRY_HEARTBEAT_INTERVAL=1s", "BATON_LOG_LEVEL=warn",
	}}
	defer f.killAll()
	for range 3 {
		if err := f.start(ctx); err != nil {
			return nil, err
		}
	}
	watch, err := ledger.NewWatch(ctx, s.etcd, ledger.DefaultPrefix, crashStallProject)
	if err != nil {
		return nil, err
	}
	wctx, stopWatch := context.WithCancel(ctx)
	var watching sync.WaitGroup
	defer watching.Wait()
	defer stopWatch()
	watching.Go(func() { watch.Run(wctx) })

	fmt.Printf("batonbench: worker crashes: at rest, %v/s for %v on each of 2 queues (3 demo-workers, TTL %v)\n",
		crashStallRate, crashStallRest, crashStallTTL)
	rest := f.streams(ctx, crashStallRest, "rest", func(context.Context) {})
	fmt.Printf("batonbench: worker crashes: %d SIGKILLs (%s), %v apart, under the same stream\n",
		len(crashRoundKinds), strings.Join(crashRoundKinds, ", "), crashStallGap)
	var rounds []crashRound
	var crashErr error
	chaos := f.streams(ctx, time.Duration(len(crashRoundKinds))*crashStallGap+2*time.Second, "chaos", func(c context.Context) {
		rounds, crashErr = f.crashes(c)
	})
	if crashErr != nil {
		return nil, fmt.Errorf("crashes: %w", crashErr)
	}
	dones, err := settleLedger(ctx, s.etcd, watch, append(streamsOf(rest), streamsOf(chaos)...))
	if err != nil {
		return nil, err
	}
	return crashStallFigures(rest, chaos, rounds, dones), nil
}

// start runs one more demo worker and waits until it is ready.
func (f *crashFleet) start(ctx context.Context) error {
	p, err := workerproc.Start(workerproc.Options{}, f.bin, fmt.Sprintf("w%d", f.next), f.env)
	if err != nil {
		return err
	}
	f.next++
	f.procs = append(f.procs, p)
	return p.WaitReady(ctx, time.Minute)
}

func (f *crashFleet) killAll() {
	for _, p := range f.procs {
		p.Kill()
	}
}

// live returns the processes that have not exited.
func (f *crashFleet) live() []*workerproc.Proc {
	var out []*workerproc.Proc
	for _, p := range f.procs {
		if !p.Exited() {
			out = append(out, p)
		}
	}
	return out
}

// leaders returns, per queue, the live process that leads it with a dispatcher run, and the run.
func (f *crashFleet) leaders() (map[string]*workerproc.Proc, map[string]string) {
	procs, runs := map[string]*workerproc.Proc{}, map[string]string{}
	for _, p := range f.live() {
		st, ok := workerproc.Status(p.Addr)
		if !ok {
			continue
		}
		for _, q := range f.queues {
			if qs, ok := workerproc.Leading(st, q); ok {
				procs[q], runs[q] = p, qs.RunID
			}
		}
	}
	return procs, runs
}

// lastTaskWorker returns the server ID of the worker that completed the run's last workflow task (it
// holds the run in its sticky cache), from the run's history: a demo worker's identity is
// <server ID>@<task queue>.
func (f *crashFleet) lastTaskWorker(ctx context.Context, queue, runID string) string {
	id, _ := takeover.WorkflowID(crashStallProject, queue)
	iter := f.s.tc.GetWorkflowHistory(ctx, id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	last := ""
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			return ""
		}
		if a := ev.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			last = a.GetIdentity()
		}
	}
	server, _, _ := strings.Cut(last, "@")
	return server
}

// victim picks the worker a round of kind kills, and the queues whose requests its crash may delay.
// A non-leader is, by preference, a worker that leads nothing and holds a run's workflow tasks, then
// one that holds the tasks of a run of a queue it does not lead, then any worker that leads nothing.
// A leader is the leader of the round's queue.
func (f *crashFleet) victim(ctx context.Context, kind string, round int) (*workerproc.Proc, []string, error) {
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); sleepCtx(ctx, 100*time.Millisecond) {
		leaders, runs := f.leaders()
		if len(leaders) < len(f.queues) {
			continue // a takeover is under way
		}
		if kind == crashStallLeader {
			q := f.queues[round%len(f.queues)]
			return leaders[q], []string{q}, nil
		}
		led := map[*workerproc.Proc][]string{}
		for q, p := range leaders {
			led[p] = append(led[p], q)
		}
		notLed := func(p *workerproc.Proc) []string {
			var out []string
			for _, q := range f.queues {
				if leaders[q] != p {
					out = append(out, q)
				}
			}
			return out
		}
		var holders []*workerproc.Proc
		for _, q := range f.queues {
			holder := f.lastTaskWorker(ctx, q, runs[q])
			for _, p := range f.live() {
				if p.ID == holder && p != leaders[q] {
					holders = append(holders, p)
				}
			}
		}
		for _, p := range holders {
			if len(led[p]) == 0 {
				return p, notLed(p), nil
			}
		}
		if len(holders) > 0 {
			return holders[0], notLed(holders[0]), nil
		}
		for _, p := range f.live() {
			if len(led[p]) == 0 {
				fmt.Printf("batonbench: worker crashes: every run's tasks are on its leader; %s, which leads nothing, is killed\n", p.ID)
				return p, notLed(p), nil
			}
		}
	}
	return nil, nil, fmt.Errorf("no %s to kill: the queues' leaders stayed unknown for a minute", kind)
}

// crashes runs the rounds until ctx ends: each SIGKILLs its victim, starts a process in its place
// (as a supervisor would) and waits for the next round's turn.
func (f *crashFleet) crashes(ctx context.Context) ([]crashRound, error) {
	var rounds []crashRound
	if !sleepCtx(ctx, 2*time.Second) {
		return nil, ctx.Err()
	}
	for i, kind := range crashRoundKinds {
		began := time.Now()
		p, queues, err := f.victim(ctx, kind, i/2)
		if err != nil {
			return rounds, err
		}
		at := time.Now()
		p.Kill()
		rounds = append(rounds, crashRound{kind: kind, victim: p.ID, queues: queues, at: at})
		fmt.Printf("batonbench: worker crashes: round %d: SIGKILL of %s (%s; its crash may delay %s)\n", i+1, p.ID, kind, strings.Join(queues, ", "))
		if err := f.start(ctx); err != nil {
			return rounds, err
		}
		if i < len(crashRoundKinds)-1 && !sleepCtx(ctx, crashStallGap-time.Since(began)) {
			break
		}
	}
	return rounds, nil
}

// queueStream is one queue's requests of a phase.
type queueStream struct {
	queue string
	reqs  []*sentReq
}

// streams sends the steady stream to every queue for d while during runs beside it, and returns the
// requests once every send returned.
func (f *crashFleet) streams(ctx context.Context, d time.Duration, phase string, during func(context.Context)) []queueStream {
	out := make([]queueStream, len(f.queues))
	fs := []func(context.Context){during}
	for i, q := range f.queues {
		id, _ := takeover.WorkflowID(crashStallProject, q)
		send := func(ctx context.Context, req dispatcher.Request) error {
			// Fire and forget: a failed send (a handover's gap) is sent again until Temporal takes it.
			return harness.Poll(ctx, 0, 20*time.Millisecond, func() error {
				return f.s.tc.SignalWorkflow(ctx, id, "", dispatcher.SignalDispatch, req)
			})
		}
		fs = append(fs, func(c context.Context) {
			out[i] = queueStream{queue: q, reqs: stream(c, crashStallRate, fmt.Sprintf("crash-%s-%s", phase, q), send)}
		})
	}
	parallel(ctx, d, fs...)
	return out
}

func streamsOf(qs []queueStream) []*sentReq {
	var out []*sentReq
	for _, q := range qs {
		out = append(out, q.reqs...)
	}
	return out
}

// settleLedger waits, up to crashStallSettle, until the ledger watch has seen a done record of every
// accepted request, and returns the completions it saw.
func settleLedger(ctx context.Context, cli *clientv3.Client, watch *ledger.Watch, reqs []*sentReq) (map[string][]ledger.Completion, error) {
	var dones map[string][]ledger.Completion
	for deadline := time.Now().Add(crashStallSettle); ; sleepCtx(ctx, 200*time.Millisecond) {
		now, err := cli.Get(ctx, ledger.Range(ledger.DefaultPrefix, crashStallProject), clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return nil, err
		}
		wctx, cancel := context.WithTimeout(ctx, crashStallSettle)
		err = watch.WaitFor(wctx, now.Header.Revision)
		cancel()
		if err != nil {
			return nil, err
		}
		dones, _ = watch.Seen()
		missing := 0
		for _, r := range reqs {
			if r.accepted && len(dones[r.key]) == 0 {
				missing++
			}
		}
		if missing == 0 || time.Now().After(deadline) {
			return dones, nil
		}
	}
}

// crashStallFigures are send -> handled of every request sent across the crashes, of those a
// non-leader's and a leader's crash may have delayed (sent to one of its queues after it and before
// the next round), beside the stream at rest; and the accepted requests never handled.
func crashStallFigures(rest, chaos []queueStream, rounds []crashRound, dones map[string][]ledger.Completion) []benchreport.Figure {
	latency := func(r *sentReq) (float64, bool) {
		if c := dones[r.key]; r.accepted && len(c) > 0 {
			return benchreport.Ms(c[0].Seen.Sub(r.sent)), true
		}
		return 0, false
	}
	var restMs, all []float64
	byKind := map[string][]float64{}
	lost, accepted := 0.0, 0
	for _, r := range streamsOf(rest) {
		if ms, ok := latency(r); ok {
			restMs = append(restMs, ms)
		}
	}
	for _, qs := range chaos {
		for _, r := range qs.reqs {
			if !r.accepted {
				continue
			}
			accepted++
			ms, ok := latency(r)
			if !ok {
				lost++
				continue
			}
			all = append(all, ms)
			if round, ok := roundOf(rounds, qs.queue, r.sent); ok {
				byKind[round.kind] = append(byKind[round.kind], ms)
			}
		}
	}
	var victims []string
	for _, r := range rounds {
		victims = append(victims, r.victim+" ("+r.kind+")")
	}
	fmt.Printf("batonbench: worker crashes: killed %s; %d requests accepted across them, %v never handled\n",
		strings.Join(victims, ", "), accepted, lost)
	target := crashStallTTL + time.Second
	targetText := fmt.Sprintf("p99 <= TTL + 1 s = %d ms", target.Milliseconds())
	met := func(f benchreport.Figure) bool { return f.P99 <= benchreport.Ms(target) }
	const baseline = "the same stream at rest, no crash"
	name := fmt.Sprintf("send -> handled across %d SIGKILLs of demo-workers under load (3 workers, 2 queues, TTL %v, %v/s per queue, signals; handled = the ledger's done record)",
		len(rounds), crashStallTTL, crashStallRate)
	return []benchreport.Figure{
		benchreport.NewFigure(name+": every request", "ms", all, baseline, restMs, targetText, met),
		benchreport.NewFigure(name+": requests to queues the killed worker did not lead, after a non-leader's crash", "ms",
			byKind[crashStallNonLeader], baseline, restMs, targetText, met),
		benchreport.NewFigure(name+": requests to the killed leader's queue, after its crash", "ms",
			byKind[crashStallLeader], baseline, restMs, targetText, met),
		benchreport.Single(fmt.Sprintf("accepted but never handled across %d SIGKILLs of demo-workers under load (of %d)", len(rounds), accepted),
			"requests", lost, "-", 0, "0", lost == 0),
	}
}

// roundOf returns the last round before sent, if a request to queue sent then was one its crash may
// have delayed.
func roundOf(rounds []crashRound, queue string, sent time.Time) (crashRound, bool) {
	for i := len(rounds) - 1; i >= 0; i-- {
		if r := rounds[i]; !sent.Before(r.at) {
			for _, q := range r.queues {
				if q == queue {
					return r, true
				}
			}
			return crashRound{}, false
		}
	}
	return crashRound{}, false
}

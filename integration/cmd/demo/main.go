// Command demo is `make demo`: real etcd and a real Temporal server in-process, three workers
// campaigning for four queues and taking over their dispatcher workflows, a leader cut off from etcd
// and a graceful handover, explained as it happens.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/temporalx"
	"github.com/baton-run/baton/takeover"
)

const (
	project = "demo"
	ttl     = 3 * time.Second
)

var queues = []string{"orders", "payments", "refunds", "invoices"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// worker is one simulated process: its own etcd connection (through a proxy, so the demo can cut it)
// and its own Elector campaigning for every queue.
type worker struct {
	id     string
	proxy  *etcdtest.Proxy
	el     *election.Elector
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

type board struct {
	mu    sync.Mutex
	terms map[string]*election.Term // queue -> current term
	runs  map[string]takeover.Run   // queue -> current dispatcher run
	log   chan string
}

func (b *board) elected(term *election.Term, run takeover.Run) {
	b.mu.Lock()
	b.terms[term.Queue()] = term
	b.runs[term.Queue()] = run
	b.mu.Unlock()
	b.log <- fmt.Sprintf("%-9s %s now leads (token %d); dispatcher run …%s via %s in %v", term.Queue(), term.LeaderID(),
		term.Token(), short(run.RunID), run.Path, run.Latency.Round(time.Millisecond))
}

func (b *board) run(queue string) takeover.Run {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.runs[queue]
}

func (b *board) current(queue string) *election.Term {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.terms[queue]
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	started := time.Now()

	say("Starting a real etcd server in this process (embedded, loopback only)...")
	cluster, err := etcdtest.StartCluster(etcdtest.Options{})
	if err != nil {
		return err
	}
	defer cluster.Close()

	say("Starting a real Temporal server in this process (temporaltest, SQLite in memory)...")
	temporal, err := temporalx.StartServer(temporalx.Options{})
	if err != nil {
		return err
	}
	defer temporal.Close()
	tc, err := temporal.NewClient()
	if err != nil {
		return err
	}
	defer tc.Close()
	stopWorkers, err := runDispatchers(cluster, tc)
	if err != nil {
		return err
	}
	defer stopWorkers()

	b := &board{terms: map[string]*election.Term{}, runs: map[string]takeover.Run{}, log: make(chan string, 100)}
	go func() {
		for line := range b.log {
			fmt.Printf("  [%6.2fs] %s\n", time.Since(started).Seconds(), line)
		}
	}()
	defer close(b.log)

	say("Starting 3 workers. Each holds one etcd lease (TTL %v) and campaigns for %d queues.", ttl, len(queues))
	workers := map[string]*worker{}
	for _, id := range []string{"worker-1", "worker-2", "worker-3"} {
		w, err := startWorker(ctx, cluster, tc, id, b)
		if err != nil {
			return err
		}
		workers[id] = w
		time.Sleep(50 * time.Millisecond) // stagger, so the first worker wins everything
	}
	defer func() {
		// Stop every worker at once, so none wins again from the others' resignations.
		for _, w := range workers {
			w.cancel()
		}
		for _, w := range workers {
			w.wg.Wait()
		}
	}()
	if err := waitAllLed(ctx, b); err != nil {
		return err
	}
	printTable(b)

	say("(Letting the dispatcher runs age past Temporal's 1 s guard against restarting the same workflow ID.)")
	time.Sleep(1200 * time.Millisecond)
	victim := b.current(queues[0])
	victimRun := b.run(queues[0])
	say("\nCrash drill: cutting %s off from etcd (as if its host lost the network).", victim.LeaderID())
	say("Its own watchdog must end its terms before etcd expires its lease, and another worker must take over.")
	cut := time.Now()
	workers[victim.LeaderID()].proxy.Blackhole()
	successor, err := waitNewLeader(ctx, b, queues[0], victim)
	if err != nil {
		return err
	}
	ended, _ := victim.Ended()
	say("%s stepped down %v after the cut (%v), before etcd's lease expiry; %s took over %v after the cut.",
		victim.LeaderID(), ended.Sub(cut).Round(time.Millisecond), victim.Err(), successor.LeaderID(),
		successor.Started().Sub(cut).Round(time.Millisecond))
	if err := waitAllLed(ctx, b); err != nil {
		return err
	}
	explainRun(ctx, tc, victimRun)
	printTable(b)

	time.Sleep(1200 * time.Millisecond)
	leaving := b.current(queues[1])
	leavingRun := b.run(queues[1])
	say("\nRolling restart: %s shuts down gracefully. It resigns every term, so followers win at once.", leaving.LeaderID())
	w := workers[leaving.LeaderID()]
	w.stop()
	next, err := waitNewLeader(ctx, b, queues[1], leaving)
	if err != nil {
		return err
	}
	ended, _ = leaving.Ended()
	say("%s handed %s to %s in %v (no TTL wait).", leaving.LeaderID(), queues[1], next.LeaderID(),
		next.Started().Sub(ended).Round(time.Microsecond))
	if err := waitAllLed(ctx, b); err != nil {
		return err
	}
	explainRun(ctx, tc, leavingRun)
	printTable(b)

	say("\nHealing the cut worker: it rejoins as a follower; leaders keep their queues.")
	workers[victim.LeaderID()].proxy.Heal()
	time.Sleep(2 * time.Second)
	printTable(b)
	say("\nShutting down: every worker resigns and revokes its lease. Done in %v.", time.Since(started).Round(time.Second))
	return nil
}

func startWorker(ctx context.Context, cluster *etcdtest.Cluster, tc client.Client, id string, b *board) (*worker, error) {
	proxy, err := etcdtest.NewProxy(cluster.MemberEndpoint(0))
	if err != nil {
		return nil, err
	}
	cli, err := cluster.NewClient(proxy.URL())
	if err != nil {
		proxy.Close()
		return nil, err
	}
	el, err := election.New(cli, election.Config{TTL: ttl})
	if err != nil {
		return nil, err
	}
	mgr, err := takeover.New(tc, takeover.Config{})
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{id: id, proxy: proxy, el: el, cancel: cancel}
	for _, q := range queues {
		w.wg.Go(func() {
			var mine takeover.Run
			_ = el.Run(wctx, project, q, id, election.Callbacks{
				OnElected: func(ctx context.Context, term *election.Term) error {
					run, err := mgr.Take(ctx, term)
					if err != nil {
						b.log <- fmt.Sprintf("%-9s %s could not take over the dispatcher: %v", q, id, err)
						return err
					}
					mine = run
					b.elected(term, run)
					<-ctx.Done()
					return nil
				},
				OnResign: func(ctx context.Context, term *election.Term) {
					if mine.Owner.Token != term.Token() {
						return // this term never got its run
					}
					if err := mgr.StepDown(ctx, term, mine); err != nil {
						b.log <- fmt.Sprintf("%-9s %s step-down: %v", q, id, err)
					}
				},
				OnStepDown: func(term *election.Term, cause error) {
					b.log <- fmt.Sprintf("%-9s %s stepped down: %v", term.Queue(), term.LeaderID(), cause)
				},
			})
		})
	}
	go func() {
		<-wctx.Done()
		w.wg.Wait()
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
		defer ccancel()
		_ = el.Close(cctx)
		cli.Close()
		proxy.Close()
	}()
	return w, nil
}

func (w *worker) stop() {
	w.cancel()
	w.wg.Wait()
}

func waitAllLed(ctx context.Context, b *board) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		all := true
		for _, q := range queues {
			if t := b.current(q); t == nil || t.Err() != nil {
				all = false
			}
		}
		if all {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("not every queue got a leader within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitNewLeader(ctx context.Context, b *board, queue string, old *election.Term) (*election.Term, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		if t := b.current(queue); t != nil && t != old {
			return t, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, fmt.Errorf("%s: no new leader within 30s", queue)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// runDispatchers runs the reference dispatcher workflow for every queue on a Temporal worker.
func runDispatchers(cluster *etcdtest.Cluster, tc client.Client) (func(), error) {
	cli, err := cluster.NewClient()
	if err != nil {
		return nil, err
	}
	ledger, err := dispatcher.NewEtcdLedger(cli, "", time.Hour)
	if err != nil {
		return nil, err
	}
	acts := &dispatcher.Activities{Ledger: ledger, Handler: func(context.Context, string, dispatcher.Request, takeover.Owner) error { return nil }}
	var workers []sdkworker.Worker
	for _, q := range queues {
		w := sdkworker.New(tc, q, sdkworker.Options{})
		dispatcher.Register(w, acts)
		if err := w.Start(); err != nil {
			return nil, err
		}
		workers = append(workers, w)
	}
	return func() {
		for _, w := range workers {
			w.Stop()
		}
		cli.Close()
	}, nil
}

// explainRun prints how an earlier owner's dispatcher run ended, from Temporal's own history.
func explainRun(ctx context.Context, tc client.Client, run takeover.Run) {
	resp, err := tc.DescribeWorkflowExecution(ctx, run.WorkflowID, run.RunID)
	if err != nil {
		say("  could not describe %s: %v", run.WorkflowID, err)
		return
	}
	info := resp.GetWorkflowExecutionInfo()
	reason := ""
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		iter := tc.GetWorkflowHistory(ctx, run.WorkflowID, run.RunID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
		for iter.HasNext() {
			if ev, err := iter.Next(); err == nil {
				reason = ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason()
			}
		}
	}
	say("Temporal: %s run …%s of %s is %v: %q", run.WorkflowID, short(run.RunID), run.Owner.ServerID, info.GetStatus(), reason)
}

func printTable(b *board) {
	time.Sleep(50 * time.Millisecond) // let the event lines print first
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\n  QUEUE\tLEADER\tTOKEN\tDISPATCHER RUN\tLEADING FOR")
	qs := slices.Clone(queues)
	slices.Sort(qs)
	for _, q := range qs {
		t := b.current(q)
		if t == nil || t.Err() != nil {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\t-\n", q)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t…%s\t%v\n", q, t.LeaderID(), t.Token(), short(b.run(q).RunID), time.Since(t.Started()).Round(time.Millisecond))
	}
	tw.Flush()
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

// short is the tail of a run ID (Temporal's run IDs are UUIDv7: their heads are timestamps).
func short(runID string) string { return runID[max(0, len(runID)-8):] }

// Command demo is `make demo`: real etcd in-process, three workers campaigning for four queues, a
// leader cut off from etcd and a graceful handover, explained as it happens.
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

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/etcdtest"
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
	log   chan string
}

func (b *board) elected(term *election.Term) {
	b.mu.Lock()
	b.terms[term.Queue()] = term
	b.mu.Unlock()
	b.log <- fmt.Sprintf("%-9s %s now leads (fencing token %d)", term.Queue(), term.LeaderID(), term.Token())
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

	b := &board{terms: map[string]*election.Term{}, log: make(chan string, 100)}
	go func() {
		for line := range b.log {
			fmt.Printf("  [%6.2fs] %s\n", time.Since(started).Seconds(), line)
		}
	}()
	defer close(b.log)

	say("Starting 3 workers. Each holds one etcd lease (TTL %v) and campaigns for %d queues.", ttl, len(queues))
	workers := map[string]*worker{}
	for _, id := range []string{"worker-1", "worker-2", "worker-3"} {
		w, err := startWorker(ctx, cluster, id, b)
		if err != nil {
			return err
		}
		workers[id] = w
		defer w.stop()
		time.Sleep(50 * time.Millisecond) // stagger, so the first worker wins everything
	}
	if err := waitAllLed(ctx, b); err != nil {
		return err
	}
	printTable(b)

	victim := b.current(queues[0])
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
	printTable(b)

	leaving := b.current(queues[1])
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
	printTable(b)

	say("\nHealing the cut worker: it rejoins as a follower; leaders keep their queues.")
	workers[victim.LeaderID()].proxy.Heal()
	time.Sleep(2 * time.Second)
	printTable(b)
	say("\nShutting down: every worker resigns and revokes its lease. Done in %v.", time.Since(started).Round(time.Second))
	return nil
}

func startWorker(ctx context.Context, cluster *etcdtest.Cluster, id string, b *board) (*worker, error) {
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
	wctx, cancel := context.WithCancel(ctx)
	w := &worker{id: id, proxy: proxy, el: el, cancel: cancel}
	for _, q := range queues {
		w.wg.Go(func() {
			_ = el.Run(wctx, project, q, id, election.Callbacks{
				OnElected: func(ctx context.Context, term *election.Term) error {
					b.elected(term)
					<-ctx.Done()
					return nil
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

func printTable(b *board) {
	time.Sleep(50 * time.Millisecond) // let the event lines print first
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\n  QUEUE\tLEADER\tTOKEN\tLEADING FOR")
	qs := slices.Clone(queues)
	slices.Sort(qs)
	for _, q := range qs {
		t := b.current(q)
		if t == nil || t.Err() != nil {
			fmt.Fprintf(tw, "  %s\t-\t-\t-\n", q)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%v\n", q, t.LeaderID(), t.Token(), time.Since(t.Started()).Round(time.Millisecond))
	}
	tw.Flush()
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// bnode is one incarnation of a balance process: its own clientv3 over the model, a real Elector and
// a real balance.Runner campaigning for the queues the process serves.
type bnode struct {
	w      *BalanceWorld
	slot   int
	name   string
	queues []string
	ver    string
	clk    *nodeClock
	cli    *clientv3.Client
	el     *election.Elector
	runner *balance.Runner
	ctx    context.Context
	cancel context.CancelFunc
	done   sync.WaitGroup

	// under w.mu
	crashed  bool
	draining bool
	terms    map[string]*election.Term
}

func (w *BalanceWorld) newNode(slot, gen int) *bnode {
	name := fmt.Sprintf("n%d.%d", slot, gen)
	n := &bnode{w: w, slot: slot, name: name, queues: w.plan.serves[slot], ver: w.version, clk: newNodeClock(w.s.Source("clock/" + name)),
		terms: map[string]*election.Term{}}
	n.ctx, n.cancel = context.WithCancel(w.ctx)
	w.mu.Lock()
	w.nodes = append(w.nodes, n)
	w.mu.Unlock()
	return n
}

func (n *bnode) start() {
	n.w.rec.Add(n.name, "start serving %v version %q", n.queues, n.ver)
	n.cli = n.w.model.NewClient(n.ctx, n.name)
	el, err := election.New(n.cli, election.Config{TTL: electionTTL, Clock: n.clk})
	if err != nil {
		n.w.violate("election.New: %v", err)
		return
	}
	n.el = el
	r, err := balance.New(el, n.cli, balance.Config{Project: Project, ServerID: n.name, Queues: n.queues, Clock: n.clk,
		Version: n.ver, Events: n.event, Logger: n.w.logger(n.name)})
	if err != nil {
		n.w.violate("balance.New: %v", err)
		return
	}
	n.runner = r
	n.done.Go(func() {
		if err := r.Run(n.ctx, n.callbacks); err != nil && n.ctx.Err() == nil {
			n.w.violate("%s: balance Run: %v", n.name, err)
		}
	})
}

func (n *bnode) callbacks(q string) election.Callbacks {
	return election.Callbacks{
		OnElected: func(ctx context.Context, t *election.Term) error {
			n.w.elected(n, q, t)
			<-ctx.Done()
			n.w.returned(n, q, t)
			return nil
		},
		OnStepDown: func(t *election.Term, cause error) {
			n.w.rec.Add(n.name, "step down %s token=%d: %s", q, t.Token(), election.EndReason(cause))
		},
	}
}

// event records the Runner's hand-overs: the reason of the next owner change of the queue.
func (n *bnode) event(e event.Event) {
	if e.Kind != event.HandingOver {
		return
	}
	n.w.rec.Add(n.name, "handing %s over (%s) to %q", e.Queue, e.Reason, e.Peer)
	n.w.mu.Lock()
	defer n.w.mu.Unlock()
	n.w.handing[e.Queue] = handOver{reason: e.Reason, from: n.name}
}

// stop ends the incarnation (after a crash its network is cut first) and waits for its goroutines.
func (n *bnode) stop() {
	n.cancel()
	n.done.Wait()
	if n.el != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(n.w.ctx), 30*time.Second)
		_ = n.el.Close(cctx)
		cancel()
	}
	if n.cli != nil {
		n.cli.Close()
	}
	n.w.rec.Add(n.name, "stopped")
}

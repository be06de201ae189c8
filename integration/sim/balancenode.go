package sim

import (
	"context"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
)

// bnode is one incarnation of a balance process: its own clientv3 over the model, a real Elector and
// a real balance.Runner campaigning for the queues the process serves.
type bnode struct {
	proc
	w      *BalanceWorld
	queues []string
	ver    string
	runner *balance.Runner

	// under w.mu
	draining bool
	terms    map[string]*election.Term
}

func (w *BalanceWorld) newNode(slot, gen int) *bnode {
	n := &bnode{w: w, queues: w.plan.serves[slot], ver: w.version, terms: map[string]*election.Term{}}
	n.init(&w.stage, w.ctx, slot, gen)
	w.add(n)
	return n
}

func (n *bnode) start() {
	n.w.rec.Add(n.name, "start serving %v version %q", n.queues, n.ver)
	el := n.elector()
	if el == nil {
		return
	}
	r, err := balance.New(el, n.cli, balance.Config{Project: Project, ServerID: n.name, Queues: n.queues, Clock: n.clk,
		Version: n.ver, Events: n.event, Logger: n.w.logger(n.name)})
	if err != nil {
		n.w.violate("balance.New: %v", err)
		return
	}
	n.runner = r
	n.runs.Go(func() {
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

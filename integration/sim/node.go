package sim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/baton-run/baton/election"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// node is one incarnation of a simulated process: its own clientv3 over the model, a real Elector,
// one Run per queue.
type node struct {
	proc
	w *World

	terms map[string]*termState // under w.mu
}

// termState is what the world knows of one term of a node.
type termState struct {
	term     *election.Term
	running  bool // OnElected has not returned
	external bool // an operator removed its lease: its successor may win before it hears of it
}

func fenceKey(queue string) string { return "fence/" + Project + "/" + queue }

func isFenceKey(key string) bool { return strings.HasPrefix(key, "fence/") }

func (w *World) newNode(slot, gen int) *node {
	n := &node{w: w, terms: map[string]*termState{}}
	n.init(&w.stage, w.ctx, slot, gen)
	if w.plan.skews != nil {
		n.clk.setSkew(w.plan.skews[slot])
	}
	w.add(n)
	return n
}

func (n *node) start() {
	n.w.rec.Add(n.name, "start")
	el := n.elector()
	if el == nil {
		return
	}
	for _, q := range n.w.queues {
		n.runs.Go(func() {
			if err := el.Run(n.ctx, Project, q, n.name, election.Callbacks{
				OnElected:  func(ctx context.Context, t *election.Term) error { return n.lead(ctx, q, t) },
				OnStepDown: func(t *election.Term, cause error) { n.stepDown(q, t, cause) },
				// Observing runs election.Observe, whose watch starts at a past revision: the one
				// watch of the Elector that compaction can cut.
				OnNewLeader: func(l election.Leader) { n.w.rec.Add(n.name, "observed leader of %s: %s", q, l.ID) },
			}); err != nil {
				n.w.violate("%s: Run %s: %v", n.name, q, err)
			}
		})
	}
}

// lead is the leader's work: fenced writes every few hundred milliseconds while the term holds, and
// an unfinished write's worth of time after it ended before returning: up to half the safety margin
// after a loss, and up to most of ResignTimeout after a resign (a graceful stop drains its callback
// that long, while its session lives), so that whatever the Elector does meanwhile (a sweep, a
// revoke) meets a callback still running.
func (n *node) lead(ctx context.Context, q string, t *election.Term) error {
	n.w.elected(n, q, t)
	defer n.w.returned(n, q, t)
	r := n.w.s.Rand(fmt.Sprintf("lead/%s/%s/%d", n.name, q, t.Token()))
	for seq := 0; ; seq++ {
		timer := n.clk.NewTimer(time.Duration(100+r.IntN(500)) * time.Millisecond)
		select {
		case <-ctx.Done():
			timer.Stop()
			hold := time.Duration(r.Int64N(int64(n.w.margin / 2)))
			if errors.Is(context.Cause(ctx), election.ErrResigned) {
				// Within the session's lease too: no process can keep a lease it cannot renew, and a
				// session lost during the drain lets a successor in at its expiry. Half the drains
				// take all of it, as a handler that ignores its cancelled context would.
				hold = min(election.DefaultConfig().ResignTimeout*3/4, max(1, t.ValidUntil().Add(n.w.margin/2).Sub(n.clk.Now())))
				if r.IntN(2) == 0 {
					hold = time.Duration(r.Int64N(int64(hold)))
				}
			}
			finish := n.clk.NewTimer(hold)
			<-finish.C()
			return nil
		case <-timer.C():
		}
		if t.Check() != nil {
			continue
		}
		id := n.w.newWrite(fmt.Sprintf("%s/%s/%d/%d", n.name, q, t.Token(), seq), t)
		resp, err := t.Guard(ctx, clientv3.OpPut(fenceKey(q), id))
		switch {
		case err == nil && resp.Succeeded:
			n.w.probe("fenced write committed")
		case errors.Is(err, election.ErrNotLeader):
			n.w.probe("fenced write refused")
		}
	}
}

func (n *node) stepDown(q string, t *election.Term, cause error) {
	n.w.rec.Add(n.name, "step down %s token=%d: %s", q, t.Token(), election.EndReason(cause))
	switch {
	case errors.Is(cause, election.ErrLeaseDeadline):
		n.w.probe("term lost to the local lease deadline")
	case errors.Is(cause, election.ErrLeaseNotFound):
		n.w.probe("term lost to an expired or revoked lease")
	case errors.Is(cause, election.ErrKeyLost):
		n.w.probe("term lost with its key")
	}
}

func (w *World) newWrite(id string, t *election.Term) string {
	w.rmu.Lock()
	defer w.rmu.Unlock()
	w.writes[id] = fenced{key: t.Key(), token: t.Token()}
	return id
}

package sim

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// rnode is one incarnation of a process of the reconciler world, as a baton.Node wires one: its own
// clientv3 over the etcd model, the queues' real Elector (which is also the reconciler's Leaders), the
// reconciler's own Elector under reconciler.DefaultElectionPrefix, a real takeover.Manager and
// heartbeat.Writer for the queues it wins, and the real reconciler.Reconciler running its term
// (Reconciler.Run: the world drives the whole of it, the resign and the backoff included).
type rnode struct {
	proc
	w   *ReconcilerWorld
	rel *election.Elector
	mgr *takeover.Manager
	hb  *heartbeat.Writer
	rec *reconciler.Reconciler

	stands map[string]context.CancelFunc // the queues it stands for (under w.mu)
}

func (w *ReconcilerWorld) newNode(slot, gen int) *rnode {
	n := &rnode{w: w, stands: map[string]context.CancelFunc{}}
	n.init(&w.stage, w.ctx, slot, gen)
	w.add(n)
	return n
}

func (n *rnode) start() {
	w := n.w
	w.rec.Add(n.name, "start")
	el := n.elector()
	if el == nil {
		return
	}
	if err := n.wire(el); err != nil {
		w.violate("%s: %v", n.name, err)
		return
	}
	n.closers = append(n.closers, func(ctx context.Context) { _ = n.rel.Close(ctx) })
	n.runs.Go(func() {
		if err := n.rec.Run(n.ctx, n.rel); err != nil {
			w.violate("%s: Reconciler.Run: %v", n.name, err)
		}
	})
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.queues {
		if !w.removed[q] {
			n.standLocked(q)
		}
	}
}

// wire builds the incarnation's reconciler Elector, takeover Manager, heartbeat Writer and Reconciler.
func (n *rnode) wire(el *election.Elector) error {
	w := n.w
	// Each user of the process's clock draws its jitter from a stream of its own: one stream shared by
	// goroutines would hand out its draws in the Go runtime's order.
	clk := func(user string) clock.Clock { return w.s.NewClock("clock/" + n.name + "/" + user) }
	rel, err := election.New(n.cli, election.Config{Prefix: reconciler.DefaultElectionPrefix, TTL: recElectionTTL, Clock: clk("rec-election")})
	if err != nil {
		return fmt.Errorf("reconciler election.New: %w", err)
	}
	n.rel = rel
	rdb := w.redis.Client()
	tc := temporalmodel.NewClient(w.temporal, n.name, w.sender(n.name))
	if n.mgr, err = takeover.New(tc, takeover.Config{AttemptTimeout: recCallTimeout, Clock: clk("takeover")}); err != nil {
		return fmt.Errorf("takeover.New: %w", err)
	}
	if n.hb, err = heartbeat.NewWriter(rdb, heartbeat.Config{Interval: recBeat, KeyTTL: recKeyTTL, Clock: clk("heartbeat")}); err != nil {
		return fmt.Errorf("heartbeat.NewWriter: %w", err)
	}
	n.rec, err = reconciler.New(reconciler.Config{Project: Project, ServerID: n.name, Interval: recInterval, StaleAfter: recStaleAfter,
		SweepPageSize: w.plan.temporal.pageSize, TerminateRate: w.plan.temporal.rate, TerminateBurst: w.plan.temporal.burst, CallTimeout: recCallTimeout, Clock: clk("reconciler")}, rdb, &slowList{Client: tc, w: w, who: n.name}, el)
	if err != nil {
		return fmt.Errorf("reconciler.New: %w", err)
	}
	n.rec.OnCycle(func(rep reconciler.Report) { w.cycled(n.name, rep) })
	return nil
}

// standLocked campaigns for q until the queue is removed or the incarnation ends.
func (n *rnode) standLocked(q string) {
	ctx, cancel := context.WithCancel(n.ctx)
	n.stands[q] = cancel
	n.runs.Go(func() {
		err := n.el.Run(ctx, Project, q, n.name, election.Callbacks{
			OnElected: func(tctx context.Context, t *election.Term) error { return n.own(tctx, q, t) },
			OnStepDown: func(t *election.Term, cause error) {
				n.w.note(n.name, "step down %s token=%d: %s", q, t.Token(), election.EndReason(cause))
			},
		})
		if err != nil {
			n.w.violate("%s: Run %s: %v", n.name, q, err)
		}
	})
}

// own is an owner's term, as a Node's: take the queue's dispatcher over (the real takeover, which
// ends the run of the owner before and starts one with the owner memo), then heartbeat the run until
// the term ends. It leaves its run and its entry behind when it ends: a crash's, a pause's, a
// partition's debris, which the next owner's takeover or the reconciler must clean up.
func (n *rnode) own(ctx context.Context, q string, t *election.Term) error {
	w := n.w
	w.note(n.name, "elected %s token=%d", q, t.Token())
	run, err := n.mgr.Take(ctx, t)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, takeover.ErrSuperseded) {
			return nil
		}
		w.note(n.name, "takeover of %s failed: %v", q, errors.Is(err, takeover.ErrFailed))
		return err // the Elector resigns and stands again after a pause, as a Node's does
	}
	w.owned(n, q, t, run)
	err = n.hb.Run(ctx, t, run)
	w.note(n.name, "heartbeat of %s token=%d returned: %v", q, t.Token(), err != nil)
	return nil
}

// slowList is the reconciler's Temporal client: terminations through the world's Temporal network,
// and visibility pages that take up to the plan's listLatency each (a visibility store under load),
// so that a queue may change hands while a sweep is listing.
type slowList struct {
	*temporalmodel.Client
	w   *ReconcilerWorld
	who string
}

var _ reconciler.Temporal = (*slowList)(nil)

func (s *slowList) ListWorkflow(ctx context.Context, req *listRequest) (*listResponse, error) {
	if d := s.w.listLatency(s.who); d > 0 {
		t := time.NewTimer(d) // the bubble's clock
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	return s.Client.ListWorkflow(ctx, req)
}

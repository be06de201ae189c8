package baton

import (
	"context"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/takeover"
)

// newQueue wires queue's ownership lifecycle (package ownership) to this Node's components.
func (n *Node) newQueue(queue string) *ownership.Queue[*election.Term] {
	cfg := ownership.Config[*election.Term]{Queue: queue, Settings: n.cfg.Ownership, Takeover: n.takeover.Config(), EvictEvery: n.cfg.Registry.HeartbeatInterval,
		Progress: n.cfg.Progress, Taker: n.takeover, Beater: n.hb, Balancer: n.balance, Observer: nodeObserver{n}, Log: n.log, Clock: n.cfg.Clock,
		Probe: func(ctx context.Context, workflowID, runID string, now time.Time) progress.Report {
			return progress.Check(ctx, n.temporal, n.cfg.Progress, workflowID, runID, now)
		}}
	// Every queue's failing record is shared with the fleet, so that a takeover nobody can make
	// succeed backs off for every worker, not for each.
	cfg.Failures = ownership.NewEtcdFailures(n.etcd, ownership.FailingKeys{ElectionPrefix: n.queues.Config().Prefix})
	if n.reg != nil { // not a typed nil in the interface: a nil Evictor means no eviction
		cfg.Evictor = n.reg
	}
	return ownership.New(cfg)
}

// nodeObserver turns what the queues' lifecycles do into leadership events and metrics.
type nodeObserver struct{ n *Node }

func (o nodeObserver) Started(queue string, term *election.Term, run takeover.Run) {
	o.n.notify.emit(queue, leadershipEvent{kind: eventStarted, ctx: term.Context(),
		lead: Lead{Queue: queue, Token: term.Token(), Run: run, Term: term}})
}

func (o nodeObserver) Stopped(queue string, cause error) {
	o.n.notify.emit(queue, leadershipEvent{kind: eventStopped, cause: cause})
}

func (o nodeObserver) SteppedDown(ctx context.Context, queue string, cause error) {
	o.n.metrics.stepDown(ctx, queue, cause)
}

func (o nodeObserver) NewLeader(queue string, l election.Leader) {
	o.n.notify.emit(queue, leadershipEvent{kind: eventNewLeader, leader: l})
}

func (o nodeObserver) ContinuedAsNew(ctx context.Context, queue string) {
	o.n.metrics.continuedAsNew(ctx, queue)
}

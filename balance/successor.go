package balance

import (
	"context"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"
)

// Why a queue changes owner: the reasons of MetricOwnerChanges.
const (
	ReasonCrash    = "crash"    // the previous leader's term ended without a hand-off
	ReasonResign   = "resign"   // the previous leader stopped
	ReasonDrain    = "drain"    // the previous leader was draining
	ReasonShed     = "shed"     // the previous leader handed the queue over to balance leadership
	ReasonRollout  = "rollout"  // the previous leader stopped while a newer version was live
	ReasonTransfer = "transfer" // an operator moved the queue (RequestTransfer, `baton transfer`)
	ReasonUnfit    = "unfit"    // the previous leader could not supervise the queue's dispatcher (Unfit)
)

// Metric names of the balancer. With the OpenTelemetry Prometheus exporter they read
// baton_balance_owner_changes_total and baton_balance_leading.
const (
	// MetricOwnerChanges counts queues this worker won from another worker, by reason (crash, resign,
	// drain, shed, rollout, transfer), with attributes project, queue, reason. Summed over workers it is the
	// number of owner changes of each queue.
	MetricOwnerChanges = "baton.balance.owner_changes"
	// MetricLeading is the number of queues this worker leads, with attributes project and version
	// ("" for an unversioned worker); summed by version it shows which versions lead during a rollout.
	MetricLeading = "baton.balance.leading"
)

type balanceMetrics struct {
	project attribute.KeyValue
	changes metric.Int64Counter
}

func newBalanceMetrics(mp metric.MeterProvider, r *Runner) (*balanceMetrics, error) {
	meter := mp.Meter("github.com/baton-run/baton/balance")
	m := &balanceMetrics{project: attribute.String("project", r.cfg.Project)}
	var err error
	if m.changes, err = meter.Int64Counter(MetricOwnerChanges,
		metric.WithDescription("Queues this worker won from another worker, by reason (crash, resign, drain, shed, rollout).")); err != nil {
		return nil, err
	}
	leading, err := meter.Int64ObservableGauge(MetricLeading,
		metric.WithDescription("Queues this worker leads, by its version."))
	if err != nil {
		return nil, err
	}
	version := attribute.String("version", r.cfg.Version)
	if _, err := meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		o.ObserveInt64(leading, int64(r.Leading()), metric.WithAttributes(m.project, version))
		return nil
	}, leading); err != nil {
		return nil, err
	}
	return m, nil
}

// won records a queue this worker now leads: an owner change when another worker led it before, for
// the reason the previous leader's hint gave, or a crash when it left none. The hint may still be on
// its way to this worker's watch (the candidates' watch brought the term first): then it is read.
func (r *Runner) won(ctx context.Context, queue string) {
	r.mu.Lock()
	rec := r.recordLocked(queue)
	prev := rec.lastLeader
	rec.lastLeader = r.cfg.ServerID
	r.mu.Unlock()
	if prev == r.cfg.ServerID {
		return // this worker again: no owner changed
	}
	// A hand-off takes its hand-over (the run's quiesce) and a few Graces under load (the successor's
	// line-up, the resign); a hint of the previous leader's within that is this hand-off's.
	h, ok := r.roster.recentHint(queue, r.hintMemory())
	ok = ok && (prev == "" || h.From == prev)
	if !ok && prev != "" {
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Grace)
		h, ok = r.roster.readHint(rctx, r.client, queue)
		cancel()
		ok = ok && h.From == prev
	}
	reason, _, counted := changeReason(r.cfg.ServerID, prev, h, ok)
	if !counted {
		return // the queue's first leader
	}
	r.metrics.changes.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(r.metrics.project,
		attribute.String("queue", queue), attribute.String("reason", reason)))
}

// successor picks who should lead a queue after this worker (pickSuccessor) among the workers in
// line (nil: the workers standing for any of this worker's queues and the live member records),
// counting for each the queues this worker named it for a moment ago (within 2 × Grace), and
// records the choice. "" when there is nobody.
func (r *Runner) successor(line []string) string {
	counts := r.counts()
	now := r.cfg.Clock.Now()
	r.mu.Lock()
	named := map[string]int{}
	for id, at := range r.named {
		at = slices.DeleteFunc(at, func(t time.Time) bool { return now.Sub(t) > 2*r.cfg.Grace })
		if len(at) == 0 {
			delete(r.named, id)
			continue
		}
		r.named[id] = at
		named[id] = len(at)
	}
	r.mu.Unlock()
	if line != nil {
		return r.pick(line, counts, named, now)
	}
	ids := r.view.candidateIDs()
	// A worker that stands nowhere (it has only just started, or leads its share with nobody to take
	// over from) is a successor all the same: named, it stands. (Should it not campaign for this queue
	// at all, the hand-off waits Grace and the queue goes to the first in line.) Not one whose keys
	// all went: it is cut off, or gone before its member record.
	r.roster.eachMember(func(id string, _ member) {
		if !slices.Contains(ids, id) && !r.view.isGone(id) {
			ids = append(ids, id)
		}
	})
	return r.pick(ids, counts, named, now)
}

// pick is successor's choice among ids, recorded as named.
func (r *Runner) pick(ids []string, counts, named map[string]int, now time.Time) string {
	cands := make([]successorFacts, 0, len(ids))
	for _, w := range r.roster.workers(ids) {
		cands = append(cands, successorFacts{worker: w, led: counts[w.id] + named[w.id]})
	}
	best := pickSuccessor(r.cfg.ServerID, r.cfg.Version, cands)
	if best != "" {
		r.mu.Lock()
		r.named[best] = append(r.named[best], now)
		r.mu.Unlock()
	}
	return best
}

// hintGraces, in Graces, is how long after the hand-over a winner still reads a hint to learn why its
// queue moved.
const hintGraces = 10

// hintMemory is how long a hint read by this worker tells why its queue moved: the hand-over the
// hint announced (up to the election's HandOverTimeout: a planned move quiesces its run that long
// before the resign) and hintGraces Graces. (With Grace alone, every hand-off whose quiesce took
// its whole QuiesceTimeout was counted as a crash.)
func (r *Runner) hintMemory() time.Duration { return r.handOver + hintGraces*r.cfg.Grace }

// deferral is how long the other workers defer to the successor a live hint names: through the
// hand-over and two Graces, so that nobody else lines up while the leader quiesces its run.
func (r *Runner) deferral() time.Duration { return r.handOver + 2*r.cfg.Grace }

// handOff prepares the resignation of a held term: it names the successor in a hint (the others
// defer to it for a grace window) and waits, at most Grace, until the successor stands first in line
// behind this worker, so that etcd, which elects the oldest candidate, elects it. It does not wait
// for the successor's watch: a waiting candidate watches its predecessor from the current revision
// (election's waitGone), so etcd serves it at once, and a key deleted before that watch began is
// caught by the watch's created notice. etcd decides in the end; safety does not depend on any of it.
func (r *Runner) handOff(ctx context.Context, queue, reason string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Grace)
	defer cancel()
	h := hint{From: r.cfg.ServerID, To: r.nameFor(queue, reason), Reason: reason}
	if err := r.roster.putHint(ctx, r.client, queue, h); err != nil {
		r.log.Info("no hand-off hint; the queue goes to the first in line", zap.String("queue", queue), zap.Error(err))
		return
	}
	if h.To == "" {
		return
	}
	r.log.Debug("naming a successor", zap.String("queue", queue), zap.String("successor", h.To), zap.String("reason", reason))
	for {
		changed := r.view.changed()
		if line := r.view.line(queue); len(line) > 1 && line[0] == r.cfg.ServerID && line[1] == h.To {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			r.log.Info("named successor did not stand in time; the queue goes to the first in line",
				zap.String("queue", queue), zap.String("successor", h.To))
			return
		}
	}
}

// nameFor returns the worker a hand-off of queue for reason names: an operator's target for a
// transfer, the first taker in line for a drain or (one that reaches Temporal) an unfit hand-over
// (only a worker that stands for the queue can take it: one named that does not serve it would hold
// the others off for the grace window), the successor among the queue's line for a shed (a shed moves only queues another worker
// stands for; a lighter worker that stands nowhere may not serve the queue, and then the queue
// comes back here after the grace window, shed after shed: the simulator's balance world found
// that flapping), the successor among every worker otherwise, a stop (recorded as named).
func (r *Runner) nameFor(queue, reason string) string {
	switch to, asked := r.roster.transferTo(queue); {
	case reason == ReasonTransfer && asked:
		return to // the operator checked that it serves the queue
	case reason == ReasonDrain:
		return r.takerOf(queue)
	case reason == ReasonUnfit:
		return r.fitTakerOf(queue)
	case reason == ReasonShed:
		return r.successor(r.view.line(queue))
	}
	return r.successor(nil)
}

// clearHint removes this worker's hint of queue once the hand-off is over, so that a later reader
// does not take it for a fresh one.
func (r *Runner) clearHint(ctx context.Context, queue string) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Grace)
	defer cancel()
	// Only a hint on this worker's lease is this worker's: a later leader may have named another.
	key := r.roster.hintKey(queue)
	_, _ = r.client.Txn(dctx).If(clientv3.Compare(clientv3.LeaseValue(key), "=", r.roster.lease.Load())).
		Then(clientv3.OpDelete(key)).Commit()
}

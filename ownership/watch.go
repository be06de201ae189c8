package ownership

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/registry"
)

// UnfitAfter is how many progress intervals Temporal must stay unreachable from the owner before it
// hands the queue to a worker that can supervise it (Balancer.Unfit).
const UnfitAfter = 3

// watchProgress checks, every Progress.Interval while term holds, that the run this process owns
// makes progress, and records what it found. A change of cause is logged once. An owner that cannot
// reach Temporal for UnfitAfter intervals hands the queue over to another worker that stands for it,
// if one does: the election and the heartbeats may still work from here, but a takeover, a
// replacement or a step-down would not.
func (q *Queue[T]) watchProgress(ctx context.Context, term T) {
	defer q.cfg.Balancer.Fit(q.cfg.Queue)
	for clock.Sleep(ctx, q.clk, clock.Jitter(q.clk, q.cfg.Progress.Interval)) {
		q.mu.Lock()
		s := q.st
		q.mu.Unlock()
		if !s.hasTerm || s.term != term || !s.open {
			continue // a takeover or a replacement is under way: readiness says so already
		}
		rep := q.cfg.Probe(ctx, s.run.WorkflowID, s.run.RunID, q.clk.Now())
		if ctx.Err() != nil {
			return
		}
		var was progress.Cause
		var since time.Time
		q.update(func(s *state[T]) {
			if !s.hasTerm || s.term != term {
				return
			}
			was = s.progress.Cause
			if rep.Cause != was { // a new cause, or none: its time starts now
				s.stalledSince = time.Time{}
				if rep.Stalled() {
					s.stalledSince = rep.CheckedAt
				}
			}
			s.progress, since = rep, s.stalledSince
		})
		q.mend(rep, since)
		switch {
		case rep.Cause == was:
		case rep.Stalled():
			q.log.Warn("dispatcher run makes no progress", zap.String("queue", q.cfg.Queue), zap.String("run_id", s.run.RunID),
				zap.String("cause", string(rep.Cause)), zap.String("detail", rep.Detail))
		default:
			q.log.Info("dispatcher run makes progress again", zap.String("queue", q.cfg.Queue), zap.String("run_id", s.run.RunID),
				zap.String("was", string(was)))
		}
	}
}

// mend marks this worker unfit for the queue while Temporal has been unreachable from it for
// UnfitAfter progress intervals, and fit again once it answers.
func (q *Queue[T]) mend(rep progress.Report, since time.Time) {
	if rep.Cause != progress.CauseUnreachable {
		q.cfg.Balancer.Fit(q.cfg.Queue)
		return
	}
	if rep.CheckedAt.Sub(since) >= UnfitAfter*q.cfg.Progress.Interval {
		q.cfg.Balancer.Unfit(q.cfg.Queue)
	}
}

// evictLoop evicts the queue's dead workers every EvictEvery while the term holds, then counts the
// queue's workers by status.
func (q *Queue[T]) evictLoop(ctx context.Context, term T) {
	for clock.Sleep(ctx, q.clk, clock.Jitter(q.clk, q.cfg.EvictEvery)) {
		if _, err := q.cfg.Evictor.Evict(ctx, term, q.cfg.Queue); err != nil && ctx.Err() == nil {
			q.log.Warn("worker eviction failed; retrying", zap.String("queue", q.cfg.Queue), zap.Error(err))
			continue
		}
		counts, err := q.countWorkers(ctx)
		if err != nil {
			continue
		}
		q.update(func(s *state[T]) { s.workers = counts })
	}
}

// countWorkers pages through the queue's workers (at most maxCounted) and counts them by status.
func (q *Queue[T]) countWorkers(ctx context.Context) (map[registry.Status]int, error) {
	const page, maxCounted = 1000, 100_000
	counts := map[registry.Status]int{registry.StatusOnline: 0, registry.StatusDraining: 0, registry.StatusOffline: 0}
	cursor, seen := "", 0
	for seen < maxCounted {
		ws, next, err := q.cfg.Evictor.List(ctx, registry.Filter{Queue: q.cfg.Queue}, cursor, page)
		if err != nil {
			return nil, err
		}
		for _, w := range ws {
			counts[w.Status]++
		}
		seen += len(ws)
		if cursor = next; cursor == "" {
			break
		}
	}
	return counts, nil
}

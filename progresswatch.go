package baton

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/progress"
)

// watchProgress checks, every Progress.Interval while term holds, that the run this process owns
// for queue makes progress, and records what it found for Status, readiness and the
// baton.dispatch.stalled gauge. A change of cause is logged once.
func (n *Node) watchProgress(ctx context.Context, queue string, term *election.Term) {
	cfg := n.cfg.Progress
	for clock.Sleep(ctx, clock.Real(), clock.Jitter(cfg.Interval)) {
		var wfID, runID string
		var open bool
		n.mu.Lock()
		if s := n.state[queue]; s.term == term {
			wfID, runID, open = s.run.WorkflowID, s.run.RunID, s.open
		}
		n.mu.Unlock()
		if !open {
			continue // a takeover or a replacement is under way: readiness says so already
		}
		rep := progress.Check(ctx, n.temporal, cfg, wfID, runID, time.Now())
		if ctx.Err() != nil {
			return
		}
		var was progress.Cause
		n.update(queue, func(s *queueState) {
			if s.term != term {
				return
			}
			was = s.progress.Cause
			if rep.Cause != was || s.stalledSince.IsZero() {
				s.stalledSince = time.Time{}
				if rep.Stalled() {
					s.stalledSince = rep.CheckedAt
				}
			}
			s.progress = rep
		})
		switch {
		case rep.Cause == was:
		case rep.Stalled():
			n.log.Warn("dispatcher run makes no progress", zap.String("queue", queue), zap.String("run_id", runID),
				zap.String("cause", string(rep.Cause)), zap.String("detail", rep.Detail))
		default:
			n.log.Info("dispatcher run makes progress again", zap.String("queue", queue), zap.String("run_id", runID),
				zap.String("was", string(was)))
		}
	}
}

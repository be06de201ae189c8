package baton

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/progress"
)

// unfitAfter is how many progress intervals Temporal must stay unreachable from the owner before it
// hands the queue to a worker that can supervise it (balance.Runner.Unfit).
const unfitAfter = 3

// watchProgress checks, every Progress.Interval while term holds, that the run this process owns
// for queue makes progress, and records what it found for Status, readiness and the
// baton.dispatch.stalled gauge. A change of cause is logged once. An owner that cannot reach
// Temporal for unfitAfter intervals hands the queue over to another worker that stands for it, if
// one does: the election and the heartbeats may still work from here, but a takeover, a
// replacement or a step-down would not.
func (n *Node) watchProgress(ctx context.Context, queue string, term *election.Term) {
	cfg := n.cfg.Progress
	defer n.balance.Fit(queue)
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
		var since time.Time
		n.update(queue, func(s *queueState) {
			if s.term != term {
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
		n.mend(queue, rep, since)
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

// mend marks this worker unfit for queue while Temporal has been unreachable from it for unfitAfter
// progress intervals, and fit again once it answers.
func (n *Node) mend(queue string, rep progress.Report, since time.Time) {
	if rep.Cause != progress.CauseUnreachable {
		n.balance.Fit(queue)
		return
	}
	if rep.CheckedAt.Sub(since) >= unfitAfter*n.cfg.Progress.Interval {
		n.balance.Unfit(queue)
	}
}

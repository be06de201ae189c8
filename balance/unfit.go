package balance

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// UnfitPause is how long a worker that handed a queue over as unfit waits before it may do so again:
// two workers that both cannot supervise the queue's dispatcher do not pass it back and forth.
const UnfitPause = 5 * time.Minute

// Unfit marks this worker unable to supervise queue's dispatcher (its owner cannot reach Temporal,
// while the election and the heartbeats still work): while it leads the queue, it asks the workers
// that serve the queue to stand for it, and hands it over, as a drain does, to one that stands and
// is not draining and reports that it reaches Temporal (Config.Reach), naming it as successor,
// unpaced. With no such worker (a Temporal outage seen by every worker) it keeps the queue, and
// HandOverWaiting says why. A worker
// hands a queue over as unfit at most once per UnfitPause. The mark ends with Fit, or with that
// hand-over.
func (r *Runner) Unfit(queue string) {
	r.mu.Lock()
	rec := r.recordLocked(queue)
	was := rec.unfit
	rec.unfit = true
	r.mu.Unlock()
	if !was {
		r.view.wake(queue)
	}
}

// line returns the member records of queue's line, leader first.
func (r *Runner) line(queue string) []worker { return r.roster.workers(r.view.line(queue)) }

// fitTakerOf returns the first worker in line for queue that may take it as unfit (fitTaker).
func (r *Runner) fitTakerOf(queue string) string { return fitTaker(r.cfg.ServerID, r.line(queue)) }

// Fit ends Unfit's mark of queue.
func (r *Runner) Fit(queue string) {
	r.mu.Lock()
	r.recordLocked(queue).unfit = false
	r.mu.Unlock()
}

// unfitMove says whether this worker, which leads queue, is unfit for it and whether it hands it over
// now (recording the move). Unfit with nobody standing for the queue, it asks the workers that serve
// the queue to stand (a hint from it, without a successor, reason ReasonUnfit, renewed every Grace
// while the mark lasts), so that one can take the queue; the caller looks again within Grace.
func (r *Runner) unfitMove(ctx context.Context, queue string) (unfit, move bool) {
	rec := r.snapshot(queue)
	if !rec.unfit {
		return false, false // no line to read
	}
	selfOK := func() bool { return r.reachNow(ctx) }
	d := decideUnfit(rec, r.cfg.Clock.Now(), r.cfg.ServerID, r.line(queue), selfOK, r.cfg.Grace)
	switch {
	case d.ask:
		hctx, cancel := context.WithTimeout(ctx, r.cfg.Grace)
		defer cancel()
		if err := r.roster.putHint(hctx, r.client, queue, hint{From: r.cfg.ServerID, Reason: ReasonUnfit}); err == nil {
			r.mu.Lock()
			r.recordLocked(queue).unfitAsked = r.cfg.Clock.Now()
			r.mu.Unlock()
		}
	case d.move:
		r.mu.Lock()
		r.recordLocked(queue).unfitMoved = r.cfg.Clock.Now()
		r.mu.Unlock()
	}
	return d.unfit, d.move
}

// checkReach runs reachNow now and every ReachEvery until ctx ends.
func (r *Runner) checkReach(ctx context.Context) {
	for {
		r.reachNow(ctx)
		if !clock.Sleep(ctx, r.cfg.Clock, clock.Jitter(r.cfg.Clock, r.cfg.ReachEvery)) {
			return
		}
	}
}

// reachNow runs Config.Reach (false without one, or when ctx ends), publishes whether it passed
// (member.TemporalOK) and returns it. A change of answer is logged once.
func (r *Runner) reachNow(ctx context.Context) bool {
	if r.cfg.Reach == nil {
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.ReachEvery)
	err := r.cfg.Reach(cctx)
	cancel()
	if ctx.Err() != nil {
		return false
	}
	if r.roster.setTemporalOK(err == nil) {
		r.log.Info("Temporal reach of this worker changed", zap.Bool("temporal_ok", err == nil), zap.Error(err))
	}
	return err == nil
}

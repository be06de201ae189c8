package balance

import (
	"context"
	"time"
)

// UnfitPause is how long a worker that handed a queue over as unfit waits before it may do so again:
// two workers that both cannot supervise the queue's dispatcher do not pass it back and forth.
const UnfitPause = 5 * time.Minute

// Unfit marks this worker unable to supervise queue's dispatcher (its owner cannot reach Temporal,
// while the election and the heartbeats still work): while it leads the queue, it asks the workers
// that serve the queue to stand for it, and hands it over, as a drain does, to one that stands and
// is not draining, naming it as successor, unpaced. With no such worker it keeps the queue. A worker
// hands a queue over as unfit at most once per UnfitPause. The mark ends with Fit, or with that
// hand-over.
func (r *Runner) Unfit(queue string) {
	r.mu.Lock()
	was := r.unfit[queue]
	r.unfit[queue] = true
	r.mu.Unlock()
	if !was {
		r.view.wake(queue)
	}
}

// Fit ends Unfit's mark of queue.
func (r *Runner) Fit(queue string) {
	r.mu.Lock()
	delete(r.unfit, queue)
	r.mu.Unlock()
}

// unfitMove says whether this worker, which leads queue, is unfit for it and whether it hands it over
// now (recording the move). Unfit with nobody standing for the queue, it asks the workers that serve
// the queue to stand (a hint from it, without a successor, reason ReasonUnfit, renewed every Grace
// while the mark lasts), so that one can take the queue; the caller looks again within Grace.
func (r *Runner) unfitMove(ctx context.Context, queue string) (unfit, move bool) {
	r.mu.Lock()
	unfit = r.unfit[queue]
	last, busy, asked := r.unfitMoved[queue], r.busy[queue] > 0, r.unfitAsked[queue]
	r.mu.Unlock()
	if !unfit || busy || r.cfg.Clock.Now().Sub(last) < UnfitPause {
		return unfit, false
	}
	if r.takerOf(queue) == "" {
		if r.cfg.Clock.Now().Sub(asked) >= r.cfg.Grace {
			hctx, cancel := context.WithTimeout(ctx, r.cfg.Grace)
			defer cancel()
			if err := r.roster.putHint(hctx, r.client, queue, hint{From: r.cfg.ServerID, Reason: ReasonUnfit}); err == nil {
				r.mu.Lock()
				r.unfitAsked[queue] = r.cfg.Clock.Now()
				r.mu.Unlock()
			}
		}
		return true, false
	}
	r.mu.Lock()
	r.unfitMoved[queue] = r.cfg.Clock.Now()
	r.mu.Unlock()
	return true, true
}

// standsForUnfit says whether leader asked the workers that serve queue to stand, being unfit for it
// (a recent hint from it without a successor, reason ReasonUnfit).
func (r *Runner) standsForUnfit(queue, leader string) bool {
	h, ok := r.roster.hintFor(queue, r.deferral())
	return ok && h.From == leader && h.To == "" && h.Reason == ReasonUnfit
}

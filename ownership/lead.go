package ownership

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/takeover"
)

// Lead is one term of the queue (the election's OnElected): take the dispatcher over, then supervise
// it -- heartbeat the chain's current run, follow continue-as-new, replace a run that closed behind
// the owner's back (bounded, backed off) -- and evict dead workers until the term ends. An error
// resigns the term so that another process can try; a takeover that fails for good keeps the term
// for a while first (hold).
func (q *Queue[T]) Lead(ctx context.Context, term T) error {
	q.update(func(s *state[T]) {
		s.term, s.hasTerm, s.run, s.open, s.lastErr, s.noRunSince, s.hbErr = term, true, takeover.Run{}, false, nil, q.clk.Now(), nil
		s.handingOver, s.progress, s.stalledSince = false, progress.Report{}, time.Time{}
	})
	var evict sync.WaitGroup
	defer evict.Wait()
	// The eviction loop ends with this callback, not only with the term: a failed takeover returns
	// here to resign, and must not wait for the term to end first.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if q.cfg.Evictor != nil {
		evict.Go(func() { q.evictLoop(ctx, term) })
	}
	backoff := q.cfg.Takeover.RetryMin
	take := q.cfg.Taker.Take
	for replaced := 0; ; replaced, take = replaced+1, q.cfg.Taker.Replace {
		run, err := q.take(ctx, term, take)
		if errors.Is(err, takeover.ErrPermanent) {
			// Resigning at once would hand the same failure to the next winner within milliseconds:
			// the fleet would pass the queue around as fast as etcd elects (failing.go).
			var held bool
			if run, held, err = q.hold(ctx, term, take, err); !held {
				return nil
			}
		}
		if err != nil {
			if errors.Is(err, takeover.ErrSuperseded) && term.Err() != nil {
				return nil
			}
			return err
		}
		err = q.supervise(ctx, term, run)
		if !errors.Is(err, takeover.ErrRunClosed) {
			if term.Err() == nil && err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			return nil
		}
		var handingOver bool
		q.update(func(s *state[T]) {
			if handingOver = s.handingOver; !handingOver {
				now := q.clk.Now()
				s.open, s.lastErr, s.noRunSince, s.replaced = false, err, now, s.replaced+1
				if failedEarly(err) && now.Sub(s.openedAt) < RunFailingWithin {
					s.quickCloses, s.quickClosedAt = s.quickCloses+1, now
				} else {
					s.quickCloses = 0
				}
			}
		})
		if handingOver {
			// The close is this owner's own step-down: the term is about to end.
			return nil
		}
		if replaced >= q.cfg.MaxReplacements {
			return fmt.Errorf("baton: %d dispatcher runs closed behind this owner's back in one term; resigning: %w", replaced+1, err)
		}
		q.log.Warn("dispatcher run closed behind its owner's back; replacing it", zap.String("queue", q.cfg.Queue),
			zap.Int64("token", term.Token()), zap.Int("replacement", replaced+1), zap.Error(err))
		if !clock.Sleep(ctx, q.clk, clock.Jitter(q.clk, backoff)) {
			return nil
		}
		backoff = min(2*backoff, q.cfg.Takeover.RetryMax)
	}
}

// failedEarly reports whether a run's close is its own failure (FAILED, TIMED_OUT): what a start
// hook or a first workflow task that fails every time ends in. An operator's terminate or cancel is
// not: it ends the streak.
func failedEarly(err error) bool {
	var closed *takeover.ClosedError
	if !errors.As(err, &closed) {
		return false
	}
	return closed.Status == enumspb.WORKFLOW_EXECUTION_STATUS_FAILED || closed.Status == enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT
}

// takeFunc is a takeover of a term: Taker.Take or Taker.Replace.
type takeFunc = func(context.Context, takeover.Term) (takeover.Run, error)

// take runs one takeover (Take or Replace) of term and records its outcome; the first run of a term
// that opens is announced to the Observer, and clears the queue's failing record.
func (q *Queue[T]) take(ctx context.Context, term T, take takeFunc) (takeover.Run, error) {
	// No hand-off between terminating the prior run and starting ours: it would waste the takeover.
	takingOver := q.cfg.Balancer.TakingOver(q.cfg.Queue)
	run, err := take(ctx, term)
	takingOver()
	if err != nil {
		q.update(func(s *state[T]) {
			s.lastErr = err
			if errors.Is(err, takeover.ErrPermanent) {
				s.permanent = err
			}
		})
		return takeover.Run{}, err
	}
	var announce, failing bool
	q.update(func(s *state[T]) {
		s.run, s.open, s.permanent, s.takeovers, failing = run, true, nil, s.takeovers+1, s.failing.Terms > 0
		s.openedAt = q.clk.Now()
		if announce = !q.hasAnnounced || q.announced != term; announce {
			q.announced, q.hasAnnounced = term, true
		}
	})
	if announce || failing {
		q.recovered(ctx, term)
	}
	if announce {
		q.cfg.Observer.Started(q.cfg.Queue, term, run)
	}
	return run, nil
}

// supervise heartbeats run and watches it until the term ends, the heartbeat is refused (a newer
// owner's entry), or the run closes for good (an error wrapping takeover.ErrRunClosed). A run that
// continues as new is followed: the heartbeat, the snapshot and a step-down name the new current run.
func (q *Queue[T]) supervise(ctx context.Context, term T, run takeover.Run) error {
	var wg sync.WaitGroup
	defer wg.Wait() // after cancel: deferred calls run last-in, first-out
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	runs := make(chan takeover.Run, 1)
	if !q.cfg.Progress.Disabled {
		wg.Go(func() { q.watchProgress(ctx, term) })
	}
	wg.Go(func() {
		if err := q.heartbeat(ctx, term, run, runs); err != nil {
			// Redis holds a newer owner's entry for this dispatcher: this term must not go on.
			q.update(func(s *state[T]) { s.lastErr = err })
			cancel(err)
		}
	})
	for {
		next, err := q.cfg.Taker.Watch(ctx, term, run)
		if err != nil {
			if errors.Is(err, takeover.ErrRunClosed) {
				return err
			}
			return context.Cause(ctx)
		}
		run = next
		q.update(func(s *state[T]) { s.run = run })
		q.cfg.Observer.ContinuedAsNew(ctx, q.cfg.Queue)
		select {
		case <-runs:
		default:
		}
		runs <- run
	}
}

// heartbeat writes the heartbeats of the chain's current run, switching to the run that each value
// of runs names.
func (q *Queue[T]) heartbeat(ctx context.Context, term T, run takeover.Run, runs <-chan takeover.Run) error {
	for {
		hctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- q.cfg.Beater.RunReporting(hctx, term, run, func(err error) { q.heartbeatResult(term, err) })
		}()
		select {
		case run = <-runs:
			stop()
			<-done
		case err := <-done:
			stop()
			return err
		}
	}
}

// heartbeatResult records the result of a dispatcher heartbeat write of term.
func (q *Queue[T]) heartbeatResult(term T, err error) {
	q.update(func(s *state[T]) {
		switch {
		case !s.hasTerm || s.term != term:
		case err == nil:
			s.hbErr = nil
		case s.hbErr == nil:
			s.hbErr, s.hbFailingSince, s.lastErr = err, q.clk.Now(), err
		default:
			s.hbErr, s.lastErr = err, err
		}
	})
}

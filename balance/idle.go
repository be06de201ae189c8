package balance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/baton-run/baton/election"
)

// A worker leads about one in every workers of its queues and stands in line for few others; the
// rest wait for their turn to stand. A goroutine per waiting queue cost 9,000 parked goroutines per
// worker at 10,000 queues on 10 workers, and their stacks were most of a worker's memory. Waiting
// (idle) queues have none: one goroutine, dispatch, looks at an idle queue again when the view wakes
// it (a change of its candidates, or a change announced to every queue), when its vacant wait ends
// (vacant.go) or when the pause after a shed ends, and starts the queue's goroutine (stand) only once
// the worker may stand. When stand returns, the queue is idle again.

// takeWoken returns the queues woken since the last call, and whether every queue was.
func (v *view) takeWoken() (map[string]bool, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.woken.take()
}

// dispatch runs every queue (cbs, already wrapped) until ctx ends and every stand has returned: idle
// queues wait here, without a goroutine of their own. A queue whose election.Run fails for good (an
// error other than ctx's end) is not campaigned for again; its error is returned, joined with the
// others', once the rest have ended.
func (r *Runner) dispatch(ctx context.Context, cbs map[string]election.Callbacks) error {
	type stood struct {
		queue string
		shed  bool
		err   error
	}
	returned := make(chan stood)
	idle := make(map[string]bool, len(r.cfg.Queues))
	paused := map[string]time.Time{}   // queues that shed a moment ago: not before then
	timers := map[string]*time.Timer{} // a vacant wait or a pause ending wakes its queue
	wakeIn := func(queue string, d time.Duration) {
		if t, ok := timers[queue]; ok {
			t.Reset(d)
			return
		}
		timers[queue] = time.AfterFunc(d, func() { r.view.wake(queue) })
	}
	running := 0
	var errs []error
	var wg sync.WaitGroup
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
		wg.Wait()
	}()
	look := func(queue string) {
		if until, ok := paused[queue]; ok {
			if d := time.Until(until); d > 0 {
				wakeIn(queue, d)
				return
			}
			delete(paused, queue)
		}
		if !r.cfg.Disabled {
			ok, wait := r.mayStandIn(queue)
			if !ok {
				if wait > 0 {
					wakeIn(queue, wait)
				}
				return
			}
		}
		if t, ok := timers[queue]; ok {
			t.Stop()
			delete(timers, queue)
		}
		delete(idle, queue)
		running++
		wg.Go(func() {
			shed, err := r.stand(ctx, queue, cbs[queue])
			returned <- stood{queue, shed, err}
		})
	}
	for _, q := range r.cfg.Queues {
		idle[q] = true
		look(q)
	}
	done := ctx.Done()
	for running > 0 || (len(idle) > 0 && ctx.Err() == nil) {
		select {
		case <-r.view.woken.due:
			qs, all := r.view.takeWoken()
			if ctx.Err() != nil {
				continue
			}
			if all {
				for _, q := range r.cfg.Queues {
					if idle[q] {
						look(q)
					}
				}
				continue
			}
			for q := range qs {
				if idle[q] {
					look(q)
				}
			}
		case s := <-returned:
			running--
			switch {
			case s.err != nil:
				errs = append(errs, s.err)
			case ctx.Err() == nil:
				idle[s.queue] = true
				if s.shed {
					// Stay out of this queue's line for a moment, so that the handover goes to the
					// waiting candidate and not back to this worker.
					paused[s.queue] = time.Now().Add(2 * r.cfg.ShedInterval)
				}
				look(s.queue)
			}
		case <-done:
			done = nil // the stands hand their terms over and return
		}
	}
	return errors.Join(errs...)
}

package balance

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/baton-run/baton/clock"
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
	d := &idleQueues{r: r, ctx: ctx, cbs: cbs, returned: make(chan stood), idle: make(map[string]bool, len(r.cfg.Queues)),
		paused: map[string]time.Time{}, timers: map[string]clock.Timer{}}
	defer d.stop()
	for _, q := range r.cfg.Queues {
		d.idle[q] = true
		d.look(q)
	}
	done := ctx.Done()
	for d.running > 0 || (len(d.idle) > 0 && ctx.Err() == nil) {
		select {
		case <-r.view.woken.due:
			qs, all := r.view.takeWoken()
			if ctx.Err() != nil {
				continue
			}
			if all {
				for _, q := range r.cfg.Queues {
					if d.idle[q] {
						d.look(q)
					}
				}
				continue
			}
			for q := range qs { // only the woken: O(queues) per event would be minutes at 10,000 queues
				if d.idle[q] {
					d.look(q)
				}
			}
		case s := <-d.returned:
			d.running--
			switch {
			case s.err != nil:
				d.errs = append(d.errs, s.err)
			case ctx.Err() == nil:
				d.idle[s.queue] = true
				if s.shed {
					// Stay out of this queue's line for a moment, so that the handover goes to the
					// waiting candidate and not back to this worker.
					d.paused[s.queue] = r.cfg.Clock.Now().Add(2 * r.cfg.ShedInterval)
				}
				d.look(s.queue)
			}
		case <-done:
			done = nil // the stands hand their terms over and return
		}
	}
	return errors.Join(d.errs...)
}

// stood is how a queue's stand ended.
type stood struct {
	queue string
	shed  bool
	err   error
}

// idleQueues is dispatch's state: the idle queues, those paused after a shed, the timers that wake
// them, and the stands running. Only dispatch's goroutine touches it.
type idleQueues struct {
	r        *Runner
	ctx      context.Context
	cbs      map[string]election.Callbacks
	returned chan stood
	idle     map[string]bool
	paused   map[string]time.Time   // queues that shed a moment ago: not before then
	timers   map[string]clock.Timer // a vacant wait or a pause ending wakes its queue
	running  int
	errs     []error
	wg       sync.WaitGroup
}

// wakeIn wakes queue after d.
func (d *idleQueues) wakeIn(queue string, after time.Duration) {
	if t, ok := d.timers[queue]; ok {
		t.Reset(after)
		return
	}
	d.timers[queue] = d.r.cfg.Clock.AfterFunc(after, func() { d.r.view.wake(queue) })
}

// look starts the idle queue's stand if the worker may stand for it now, and otherwise wakes it when
// that may change by time alone.
func (d *idleQueues) look(queue string) {
	if until, ok := d.paused[queue]; ok {
		if wait := until.Sub(d.r.cfg.Clock.Now()); wait > 0 {
			d.wakeIn(queue, wait)
			return
		}
		delete(d.paused, queue)
	}
	if !d.r.cfg.Disabled {
		ok, wait := d.r.mayStandIn(queue)
		if !ok {
			if wait > 0 {
				d.wakeIn(queue, wait)
			}
			return
		}
	}
	if t, ok := d.timers[queue]; ok {
		t.Stop()
		delete(d.timers, queue)
	}
	delete(d.idle, queue)
	d.running++
	d.wg.Go(func() {
		shed, err := d.r.stand(d.ctx, queue, d.cbs[queue])
		d.returned <- stood{queue, shed, err}
	})
}

// stop stops the timers and waits for the stands.
func (d *idleQueues) stop() {
	for _, t := range d.timers {
		t.Stop()
	}
	d.wg.Wait()
}

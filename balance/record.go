package balance

import "time"

// record is what this worker keeps about one of its queues, beside what the view and the roster
// know of the fleet. The Runner's mu guards every record, and its count of held ones.
//
// Invariants:
//   - heldSince is zero unless held: it is when the current term began (Cooldown counts from it),
//     and a term's end clears both.
//   - Runner.leading is the number of records with held set (Leading, the fair-share comparisons
//     and the leading gauge read it without walking ten thousand records).
//   - takeovers is never negative; while it is above zero the queue is never handed off (a takeover
//     between terminating the old run and starting its own would be wasted).
//   - lastLeader, unfitMoved and unfitAsked outlive terms: lastLeader tells who a won term came from
//     (this worker included, so a term won back is no owner change), and UnfitPause spans terms.
//   - unfit is set by Unfit and cleared by Fit or by the unfit hand-over; it says nothing about held
//     (a mark on a queue this worker does not lead waits for its next term).
type record struct {
	held       bool
	heldSince  time.Time
	takeovers  int       // TakingOver calls whose done is pending
	lastLeader string    // who led the queue last, as seen here ("" before anyone did)
	unfit      bool      // this worker cannot supervise the queue's dispatcher (Unfit)
	unfitMoved time.Time // when this worker last handed the queue over as unfit
	unfitAsked time.Time // when this worker last asked the queue's workers to stand (unfit)
}

// recordLocked returns queue's record, adding an empty one the first time; the caller holds mu.
func (r *Runner) recordLocked(queue string) *record {
	rec, ok := r.records[queue]
	if !ok {
		rec = &record{}
		r.records[queue] = rec
	}
	return rec
}

// snapshot returns a copy of queue's record, read under mu.
func (r *Runner) snapshot(queue string) record {
	r.mu.Lock()
	defer r.mu.Unlock()
	return *r.recordLocked(queue)
}

// setHeldLocked records the start (at now) or the end of a term of queue; the caller holds mu.
func (r *Runner) setHeldLocked(queue string, held bool, now time.Time) {
	rec := r.recordLocked(queue)
	switch {
	case held && !rec.held:
		r.leading++
	case !held && rec.held:
		r.leading--
	}
	rec.held = held
	rec.heldSince = time.Time{}
	if held {
		rec.heldSince = now
	}
}

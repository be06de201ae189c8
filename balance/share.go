package balance

import (
	"time"

	"github.com/baton-run/baton/clock"
)

// mayStand reports whether this worker stands for queue now (mayStandIn).
func (r *Runner) mayStand(queue string) bool {
	ok, _ := r.mayStandIn(queue)
	return ok
}

// mayStandIn says whether this worker stands for queue now, and for a vacant queue whose turn has not
// come, how long until it does. A key of this worker's that stands first although the worker does not
// campaign for the queue (left by a campaign that failed in flight, or by an earlier process with the
// same server ID) is stood for again: standing replaces it, so the queue is never blocked behind it.
// A queue nobody stands for waits for this worker's turn (vacancyWait); any other, mayStandBehind.
func (r *Runner) mayStandIn(queue string) (bool, time.Duration) {
	l := r.view.leader(queue)
	if l == r.cfg.ServerID {
		return true, 0
	}
	if l == "" {
		wait := r.vacantWait(queue)
		return wait <= 0, wait
	}
	r.mu.Lock()
	r.recordLocked(queue).lastLeader = l
	r.mu.Unlock()
	h, hinted := r.roster.hintFor(queue, r.deferral())
	m, known := r.roster.member(l)
	return mayStandBehind(standFacts{self: r.cfg.ServerID, version: r.cfg.Version, leader: worker{id: l, m: m, known: known},
		hint: h, hinted: hinted, draining: r.roster.draining(), rollout: r.inRollout(),
		leading: r.Leading(), fair: r.FairShare(), leaderLeads: r.view.leads(l), shedAbove: r.cfg.ShedAbove}), 0
}

// shouldWithdraw: a candidate in line that may not stand steps out, but only behind another worker's
// leader, so that two candidates never step out of a queue together and leave it empty.
func (r *Runner) shouldWithdraw(queue string) bool {
	l := r.view.leader(queue)
	return l != "" && l != r.cfg.ServerID && !r.mayStand(queue)
}

// keeping returns how many queues this worker leads, less those it is shedding: a hand-off takes
// Grace-scale time (the successor steps into line, and its watch must be in sync), and the decision
// for the next queue must not count the one already on its way, or 2 queues on 2 workers would both
// go, and come back.
func (r *Runner) keeping() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.leading - r.shedding
}

// shouldShed returns why the held queue should be handed over now (decideShed, then paced), or ""
// and how long until it may be worth looking again (0: only when the candidates change). A move that
// goes is recorded in the pacing.
func (r *Runner) shouldShed(queue string) (string, time.Duration) {
	d := decideShed(r.shedFacts(queue))
	if d.lookAgain {
		d.wait = clock.Jitter(r.cfg.Clock, r.cfg.MoveWindow)
	}
	if d.reason == "" {
		return "", d.wait
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p, wait := pace(pacing{last: r.lastShed, moves: r.moves}, r.cfg.Clock.Now(), d.reason, r.cfg.ShedInterval, r.cfg.MaxMoves, r.cfg.MoveWindow)
	r.lastShed, r.moves = p.last, p.moves
	if wait > 0 {
		return "", wait
	}
	return d.reason, 0
}

// shedFacts gathers what decideShed reads about the held queue. Every wake of every held queue asks,
// so the facts that cost a walk of the line or of the fleet are gathered only when the cheap ones
// leave the decision open: a worker within its share that does not drain, or a queue being taken
// over, moves nothing whatever they say.
func (r *Runner) shedFacts(queue string) shedFacts {
	f := shedFacts{now: r.cfg.Clock.Now(), rec: r.snapshot(queue), draining: r.roster.draining(), keeping: r.keeping(),
		fair: r.FairShare(), shedAbove: r.cfg.ShedAbove, cooldown: r.cfg.Cooldown}
	if f.rec.takeovers > 0 || !f.draining && f.keeping <= f.fair {
		return f
	}
	line := r.view.line(queue)
	f.hasTaker = firstTaker(r.cfg.ServerID, r.roster.workers(line)) != ""
	f.rollout, f.unknown, f.others = r.inRollout(), r.unknownCandidate(), r.view.othersStand(queue, r.cfg.ServerID)
	f.lighter = lighterIn(r.cfg.ServerID, line, r.counts(), f.keeping-2)
	return f
}

// unknownCandidate reports whether a worker stands whose member record this worker has not seen yet:
// its version may start a rollout, so balancing waits for it.
func (r *Runner) unknownCandidate() bool {
	for _, id := range r.view.candidateIDs() {
		if _, ok := r.roster.member(id); !ok {
			return true
		}
	}
	return false
}

// takerOf returns the first worker in line for queue, other than this one, that does not drain; ""
// when there is none. A draining worker hands a queue over only to such a worker: workers may serve
// different queues, and a queue handed over with nobody else in line would fall vacant and come back
// to the draining worker, again and again.
func (r *Runner) takerOf(queue string) string {
	return firstTaker(r.cfg.ServerID, r.roster.workers(r.view.line(queue)))
}

// HandOverWaiting says why this worker keeps leading queue although it would hand it over, or ""
// when it does not lead the queue or nothing waits: a draining worker keeps a queue that no other
// worker stands for (none serves it, or none is up) until one does, and an unfit one (Unfit) keeps a
// queue until a worker that reaches Temporal stands for it.
func (r *Runner) HandOverWaiting(queue string) string {
	if r.cfg.Disabled || !r.isHeld(queue) {
		return ""
	}
	switch {
	case r.snapshot(queue).unfit && r.fitTakerOf(queue) == "":
		return "unfit: Temporal is unreachable from here, and no other worker that reaches it stands for this queue; it stays led here until one does"
	case r.roster.draining() && r.takerOf(queue) == "":
		return "draining: no other worker stands for this queue; it stays led here until one does"
	}
	return ""
}

// stopReason is why a stopping worker hands its queues over: a rollout when a newer version is live.
func (r *Runner) stopReason() string {
	on, newest := r.roster.rollout()
	return stopReasonOf(r.roster.draining(), on, r.cfg.Version, newest)
}

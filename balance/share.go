package balance

import (
	"math"
	"slices"
	"time"

	"github.com/baton-run/baton/clock"
)

// mayStand: a key of this worker's stands first although the worker does not campaign for the queue
// (left by a campaign that failed in flight, or by an earlier process with the same server ID:
// standing again replaces it, so the queue is never blocked behind it); nobody stands for the queue,
// and this worker's turn for it has come (vacant.go: it must not stay without a leader). Otherwise:
// while the leader names a successor, only the successor; a draining worker, never; during a rollout,
// only a worker newer than the leader (forward only, no rebalancing); else below the fair share, and
// only behind a leader that may shed (it leads more than ShedAbove × fair share): standing in line
// behind any other leader would gain this worker nothing, and at start-up every worker would stand
// for every queue.
func (r *Runner) mayStand(queue string) bool {
	ok, _ := r.mayStandIn(queue)
	return ok
}

// mayStandIn is mayStand, and for a vacant queue whose turn has not come, how long until it does.
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
	r.lastLeader[queue] = l
	r.mu.Unlock()
	if h, ok := r.roster.hintFor(queue, r.deferral()); ok && h.To != "" && h.From == l {
		return h.To == r.cfg.ServerID, 0
	}
	if r.roster.draining() {
		return false, 0
	}
	if r.standsForUnfit(queue, l) {
		// The leader cannot supervise the queue's dispatcher: stand, so that it can hand it over.
		return true, 0
	}
	if m, ok := r.roster.member(l); ok && m.Draining {
		// The leader hands over only to a worker that stands for this queue: stand, so that it can.
		return true, 0
	}
	if r.inRollout() {
		return r.rolloutStand(l), 0
	}
	fair := r.FairShare()
	return r.Leading() < fair && float64(r.view.leads(l)) > float64(fair)*r.cfg.ShedAbove, 0
}

// shouldWithdraw: a candidate in line that may not stand steps out, but only behind another worker's
// leader, so that two candidates never step out of a queue together and leave it empty.
func (r *Runner) shouldWithdraw(queue string) bool {
	l := r.view.leader(queue)
	return l != "" && l != r.cfg.ServerID && !r.mayStand(queue)
}

func (r *Runner) overShare() bool {
	limit := int(math.Ceil(float64(r.FairShare()) * r.cfg.ShedAbove))
	return r.keeping() > limit
}

// aboveShedAbove reports whether this worker leads more than ShedAbove × its fair share itself, before
// the rounding up that overShare's limit takes (which lets 2 queues on 2 workers stay 2 and 0).
func (r *Runner) aboveShedAbove() bool {
	return float64(r.keeping()) > float64(r.FairShare())*r.cfg.ShedAbove
}

// keeping returns how many queues this worker leads, less those it is shedding: a hand-off takes
// Grace-scale time (the successor steps into line, and its watch must be in sync), and the decision
// for the next queue must not count the one already on its way, or 2 queues on 2 workers would both
// go, and come back.
func (r *Runner) keeping() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.held) - r.shedding
}

// shouldShed returns why the held queue should be handed over now, or "" and how long until it may
// be worth looking again (0: only when the candidates change). A queue whose takeover is under way is
// never handed over. A draining worker hands every queue over to whoever may take it. Otherwise,
// outside a rollout, a queue held for at least Cooldown moves when this worker leads more than
// ceil(ShedAbove × fair share), or more than ShedAbove × fair share unrounded while a worker standing
// for the queue leads at least two fewer (small fleets: 2 queues on 2 workers end 1 and 1; the move
// never makes the receiver lead more than this worker then does, so nothing moves back). A worker
// within ShedAbove × fair share moves nothing: after a stop-then-start deploy of 5 workers over 100
// queues, 25, 25, 25, 25 and 0 stay so, where balancing would hand 20 queues over a second time.
// Moves are paced: ShedInterval apart and at most MaxMoves per MoveWindow.
func (r *Runner) shouldShed(queue string) (string, time.Duration) {
	r.mu.Lock()
	busy, since := r.busy[queue] > 0, r.heldSince[queue]
	r.mu.Unlock()
	if busy {
		return "", 0 // TakingOver's done wakes the queue
	}
	reason := ""
	switch {
	case r.roster.draining():
		if r.takerOf(queue) == "" {
			return "", 0 // the queue keeps its leader until a worker that serves it stands (HandOverWaiting)
		}
		reason = ReasonDrain
	case r.keeping() <= r.FairShare(), r.inRollout(), r.unknownCandidate():
		return "", 0
	case r.cfg.Clock.Now().Sub(since) < r.cfg.Cooldown:
		return "", r.cfg.Cooldown - r.cfg.Clock.Now().Sub(since)
	case !r.view.othersStand(queue, r.cfg.ServerID):
		return "", 0
	case r.overShare(), r.aboveShedAbove() && r.lighterInLine(queue, r.keeping()-2):
		reason = ReasonShed
	default:
		// Another queue's change may make a lighter worker visible here: look again now and then.
		return "", clock.Jitter(r.cfg.Clock, r.cfg.MoveWindow)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.cfg.Clock.Now()
	r.moves = slices.DeleteFunc(r.moves, func(t time.Time) bool { return now.Sub(t) >= r.cfg.MoveWindow })
	if wait := r.cfg.ShedInterval - now.Sub(r.lastShed); wait > 0 {
		return "", wait
	}
	if reason == ReasonShed && len(r.moves) >= r.cfg.MaxMoves {
		return "", r.cfg.MoveWindow - now.Sub(r.moves[0])
	}
	r.lastShed = now
	if reason == ReasonShed {
		r.moves = append(r.moves, now)
	}
	return reason, 0
}

// lighterInLine reports whether another worker standing for queue leads at most n queues.
func (r *Runner) lighterInLine(queue string, n int) bool {
	counts := r.counts()
	for _, id := range r.view.line(queue) {
		if id != r.cfg.ServerID && counts[id] <= n {
			return true
		}
	}
	return false
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
	for _, id := range r.view.line(queue) {
		if m, _ := r.roster.member(id); id != r.cfg.ServerID && !m.Draining {
			return id
		}
	}
	return ""
}

// HandOverWaiting says why this worker keeps leading queue although it would hand it over, or ""
// when it does not lead the queue or nothing waits: a draining worker keeps a queue that no other
// worker stands for (none serves it, or none is up) until one does.
func (r *Runner) HandOverWaiting(queue string) string {
	if r.cfg.Disabled || !r.isHeld(queue) || !r.roster.draining() || r.takerOf(queue) != "" {
		return ""
	}
	return "draining: no other worker stands for this queue; it stays led here until one does"
}

// stopReason is why a stopping worker hands its queues over: a rollout when a newer version is live.
func (r *Runner) stopReason() string {
	if r.roster.draining() {
		return ReasonDrain
	}
	if on, newest := r.roster.rollout(); on && olderThan(r.cfg.Version, newest) {
		return ReasonRollout
	}
	return ReasonResign
}

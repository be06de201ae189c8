package balance

import (
	"math"
	"slices"
	"time"
)

// The Runner's decisions, as functions of what it gathered from the view (candidates, leaders), the
// roster (member records, hints), the queue's record and the time, returning a decision that the
// Runner acts on. None reads a clock or a lock, none changes anything: each is table-tested on
// made-up inputs (decide_*_test.go), and the Runner's gathering is all that touches etcd's picture.

// fairShare is ceil(queues / workers), with at least one worker (this one).
func fairShare(queues, workers int) int {
	w := max(workers, 1)
	return (queues + w - 1) / w
}

// shedLimit is ceil(ShedAbove × fair share): a worker that leads more sheds.
func shedLimit(fair int, shedAbove float64) int { return int(math.Ceil(float64(fair) * shedAbove)) }

// standingOf places a worker that leads led queues against the fair share and the shedding limits.
func standingOf(led, fair int, shedAbove float64) standing {
	return standing{vsFair: cmpInt(led, fair),
		overLimit: led > shedLimit(fair, shedAbove),
		above:     float64(led) > float64(fair)*shedAbove}
}

// worker is a server ID with its member record (zero, known false, when none was seen).
type worker struct {
	id    string
	m     member
	known bool
}

// standFacts is what the decision to stand for a queue another worker leads reads.
type standFacts struct {
	self, version string
	leader        worker
	hint          hint // the queue's live hint (deferral window), if hinted
	hinted        bool
	draining      bool // this worker drains
	rollout       bool // workers of two versions are live
	leading, fair int  // queues this worker leads, and its fair share
	leaderLeads   int  // queues the leader leads
	shedAbove     float64
}

// mayStandBehind decides whether this worker stands in line for a queue led by another worker:
// while the leader names a successor, only the successor; a draining worker, never; behind a leader
// that asked its queue's workers to stand (unfit) or that drains, always, so that it can hand the
// queue over; during a rollout, only a worker newer than the leader (forward only, no rebalancing);
// else below the fair share, and only behind a leader that may shed (it leads more than ShedAbove ×
// fair share): standing in line behind any other leader would gain this worker nothing, and at
// start-up every worker would stand for every queue.
func mayStandBehind(f standFacts) bool {
	switch {
	case f.hinted && f.hint.To != "" && f.hint.From == f.leader.id:
		return f.hint.To == f.self
	case f.draining:
		return false
	case f.hinted && f.hint.From == f.leader.id && f.hint.To == "" && f.hint.Reason == ReasonUnfit:
		return true
	case f.leader.known && f.leader.m.Draining:
		return true
	case f.rollout:
		return olderThan(f.leader.m.Version, f.version)
	}
	return f.leading < f.fair && float64(f.leaderLeads) > float64(f.fair)*f.shedAbove
}

// vacancyFacts is what the wait before standing for a vacant queue reads.
type vacancyFacts struct {
	now, started, vacantSince time.Time
	rank                      int // ranked workers above this one (rankAmong)
	settle, vacantWait        time.Duration
}

// vacancyWait returns how long this worker still waits before it stands for the vacant queue
// (zero or less: stand now). Nobody stands before Settle has passed since Run began. From then on,
// or from when the queue fell vacant (or was found so) if later, the first-ranked worker stands at
// once, the second after VacantWait, every other one after twice VacantWait: a first-ranked worker
// busy with a thousand campaigns of its own (a fleet's start) gets one helper before it gets every
// other worker.
func vacancyWait(f vacancyFacts) time.Duration {
	at := maxTime(f.started.Add(f.settle), f.vacantSince)
	switch {
	case f.rank == 1:
		at = at.Add(f.vacantWait)
	case f.rank > 1:
		at = at.Add(2 * f.vacantWait)
	}
	return at.Sub(f.now)
}

// ranks reports whether a worker with member record m takes a rank for vacant queues: not while
// it drains, nor while it is older than the newest version during a rollout (a vacant queue goes
// forward).
func ranks(m member, rollout bool, newest string) bool {
	return !m.Draining && !(rollout && olderThan(m.Version, newest))
}

// rankAmong returns how many of the ranked workers (others; this one excluded) rank above self for
// queue by rendezvous hashing, ties broken by the smaller server ID.
func rankAmong(queue, self string, others []string) int {
	mine := rank(queue, self)
	above := 0
	for _, id := range others {
		if h := rank(queue, id); h > mine || h == mine && id < self {
			above++
		}
	}
	return above
}

// firstTaker returns the first worker in line (leader first), other than self, that does not drain;
// "" when there is none. A drain goes only to such a worker: workers may serve different queues, and
// a queue handed to nobody would fall vacant and come back, again and again.
func firstTaker(self string, line []worker) string {
	return firstIn(self, line, func(worker) bool { return true })
}

// fitTaker is firstTaker among the workers that report they reach Temporal now (member.TemporalOK,
// from a record this worker has seen). An unfit hand-over goes only to such a worker: during a
// Temporal outage every worker is unfit, and handing the queue to one that cannot reach Temporal
// either costs a quiesce timeout, a failed terminate and a new run for nothing, again on every worker
// in turn.
func fitTaker(self string, line []worker) string {
	return firstIn(self, line, func(w worker) bool { return w.known && w.m.TemporalOK })
}

// firstIn returns the first worker in line, other than self, that does not drain and passes ok.
func firstIn(self string, line []worker, ok func(worker) bool) string {
	for _, w := range line {
		if w.id != self && !w.m.Draining && ok(w) {
			return w.id
		}
	}
	return ""
}

// successorFacts is one possible successor: its record and how many queues it leads, counting the
// queues this worker named it for a moment ago.
type successorFacts struct {
	worker
	led int
}

// pickSuccessor picks who should lead a queue after self (of version): not self, not a draining
// worker, never one older than self when another is available (forward only), the newest version
// first, then the fewest queues led, then the oldest worker. "" when there is nobody.
func pickSuccessor(self, version string, cands []successorFacts) string {
	cs := slices.DeleteFunc(slices.Clone(cands), func(c successorFacts) bool {
		return c.id == self || c.known && c.m.Draining
	})
	if len(cs) == 0 {
		return ""
	}
	if slices.ContainsFunc(cs, func(c successorFacts) bool { return !olderThan(c.m.Version, version) }) {
		cs = slices.DeleteFunc(cs, func(c successorFacts) bool { return olderThan(c.m.Version, version) })
	}
	return slices.MinFunc(cs, func(a, b successorFacts) int {
		switch {
		case olderThan(b.m.Version, a.m.Version):
			return -1
		case olderThan(a.m.Version, b.m.Version):
			return 1
		case a.led != b.led:
			return a.led - b.led
		case a.m.Since != b.m.Since:
			if a.m.Since < b.m.Since {
				return -1
			}
			return 1
		}
		return 0
	}).id
}

// shedFacts is what the decision to hand a held queue over (drain or shed) reads.
type shedFacts struct {
	now       time.Time
	rec       record // the queue's
	draining  bool   // this worker drains
	hasTaker  bool   // a worker other than this one, not draining, stands for the queue (firstTaker)
	keeping   int    // queues this worker leads, less those it is shedding
	fair      int
	rollout   bool // workers of two versions are live
	unknown   bool // a candidate's member record is unknown (its version may start a rollout)
	others    bool // another worker stands for the queue
	lighter   bool // another worker in line leads at most keeping - 2 (lighterIn)
	shedAbove float64
	cooldown  time.Duration
}

// moveDecision is why a held queue goes now ("" when it stays), and when to look again if it stays
// (0: only when its candidates change; lookAgain: in about MoveWindow, jittered, since another
// queue's change may make a lighter worker visible here).
type moveDecision struct {
	reason    string
	wait      time.Duration
	lookAgain bool
}

// decideShed decides, before pacing, whether a held queue goes. A queue whose takeover is under way
// never goes. A draining worker hands every queue over to whoever may take it, and keeps one nobody
// else stands for. Otherwise, outside a rollout and while every candidate's version is known, a queue
// held for at least Cooldown moves when this worker leads more than ceil(ShedAbove × fair share), or
// more than ShedAbove × fair share unrounded while a worker standing for the queue leads at least two
// fewer (small fleets: 2 queues on 2 workers end 1 and 1; the move never makes the receiver lead
// more than this worker then does, so nothing moves back). A worker within ShedAbove × fair share
// moves nothing: after a stop-then-start deploy of 5 workers over 100 queues, 25, 25, 25, 25 and 0
// stay so, where balancing would hand 20 queues over a second time.
func decideShed(f shedFacts) moveDecision {
	held := f.now.Sub(f.rec.heldSince)
	switch {
	case f.rec.takeovers > 0:
		return moveDecision{} // TakingOver's done wakes the queue
	case f.draining && !f.hasTaker:
		return moveDecision{} // kept until a worker that serves it stands (HandOverWaiting)
	case f.draining:
		return moveDecision{reason: ReasonDrain}
	case f.keeping <= f.fair, f.rollout, f.unknown:
		return moveDecision{}
	case held < f.cooldown:
		return moveDecision{wait: f.cooldown - held}
	case !f.others:
		return moveDecision{}
	case f.keeping > shedLimit(f.fair, f.shedAbove), float64(f.keeping) > float64(f.fair)*f.shedAbove && f.lighter:
		return moveDecision{reason: ReasonShed}
	}
	return moveDecision{lookAgain: true}
}

// pacing is when this worker last handed a queue over by drain or shed, and its sheds within the
// last MoveWindow.
type pacing struct {
	last  time.Time
	moves []time.Time
}

// pace lets a move of reason go at now, or holds it: moves are ShedInterval apart, and sheds at most
// maxMoves per window. It returns the pacing after the decision (the move recorded when it goes) and
// how long a held move waits (0: it goes).
func pace(p pacing, now time.Time, reason string, interval time.Duration, maxMoves int, window time.Duration) (pacing, time.Duration) {
	p.moves = slices.DeleteFunc(slices.Clone(p.moves), func(t time.Time) bool { return now.Sub(t) >= window })
	if wait := interval - now.Sub(p.last); wait > 0 {
		return p, wait
	}
	if reason == ReasonShed && len(p.moves) >= maxMoves {
		return p, window - now.Sub(p.moves[0])
	}
	p.last = now
	if reason == ReasonShed {
		p.moves = append(p.moves, now)
	}
	return p, 0
}

// unfitDecision is what an unfit leader does about a queue: whether it is unfit for it, hands it over
// now (move), or asks the queue's workers to stand (ask) since none does.
type unfitDecision struct{ unfit, move, ask bool }

// decideUnfit decides for a held queue marked Unfit, whose line (leader first) is as seen: no move
// while its takeover is under way, nor within UnfitPause of the last unfit hand-over; with a taker in
// line that reaches Temporal (fitTaker), move; without one (nobody stands, or nobody who stands
// reaches Temporal: an outage), keep the queue and ask the workers that serve it to stand, again
// every grace while the mark lasts, so that a fit one steps into line and the queue moves then.
//
// selfOK is this worker's own reach check (Runner.reachNow), asked only when the queue would move: a
// leader that reaches Temporal again keeps the queue and asks nothing (its next progress check ends
// the mark). When the server comes back, the first worker whose check passes would otherwise take
// every queue of the leaders whose progress checks have not come round yet.
func decideUnfit(rec record, now time.Time, self string, line []worker, selfOK func() bool, grace time.Duration) unfitDecision {
	switch {
	case !rec.unfit:
		return unfitDecision{}
	case rec.takeovers > 0, now.Sub(rec.unfitMoved) < UnfitPause:
		return unfitDecision{unfit: true}
	case fitTaker(self, line) == "":
		return unfitDecision{unfit: true, ask: now.Sub(rec.unfitAsked) >= grace}
	case selfOK():
		return unfitDecision{unfit: true}
	}
	return unfitDecision{unfit: true, move: true}
}

// decideHeld combines the decisions about a held queue: an operator's transfer goes at once (it is
// not paced), then an unfit hand-over, then a drain or shed (shed, after pacing). An unfit queue
// that stays is looked at again within grace, to renew its request and look for a taker.
func decideHeld(shed moveDecision, transfer bool, unfit unfitDecision, grace time.Duration) (string, time.Duration) {
	switch {
	case transfer:
		return ReasonTransfer, 0
	case unfit.move:
		return ReasonUnfit, 0
	case unfit.unfit && (shed.wait == 0 || shed.wait > grace):
		return shed.reason, grace
	}
	return shed.reason, shed.wait
}

// stopReasonOf is why a stopping worker hands its queues over: a drain when it drains, a rollout when
// a newer version than its own is live, a plain resignation otherwise.
func stopReasonOf(draining, rollout bool, version, newest string) string {
	switch {
	case draining:
		return ReasonDrain
	case rollout && olderThan(version, newest):
		return ReasonRollout
	}
	return ReasonResign
}

// changeReason classifies a term this worker (self) won, whose previous leader as seen here was prev:
// the reason and sender of the hint that explains it (h, when ok, is the previous leader's), or a
// crash when none does. counted is false when no owner changed (the queue's first leader).
func changeReason(self, prev string, h hint, ok bool) (reason, from string, counted bool) {
	reason, from = ReasonCrash, prev
	if ok && h.From != self {
		reason, from = h.Reason, h.From
	}
	return reason, from, from != ""
}

// lighterIn reports whether a worker other than self in line leads at most n queues (counts).
func lighterIn(self string, line []string, counts map[string]int, n int) bool {
	return slices.ContainsFunc(line, func(id string) bool { return id != self && counts[id] <= n })
}

package ownership

import (
	"maps"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// state is what a Queue knows; mu guards it.
type state[T Term] struct {
	leader         election.Leader // as etcd shows it (advisory)
	term           T               // this process's term, while hasTerm
	hasTerm        bool
	run            takeover.Run
	open           bool      // run is open, as far as Watch knows
	noRunSince     time.Time // when the term last had no open run (its start, or a close)
	takeovers      int
	replaced       int
	openedAt       time.Time // when the term's current run was opened by a takeover or a replacement
	quickCloses    int       // runs in a row that closed behind the owner's back within RunFailingWithin
	quickClosedAt  time.Time // when the last of them closed
	lastErr        error
	permanent      error     // a takeover failure that retrying cannot fix, until a takeover succeeds
	failing        Failing   // the queue's failing record as this process last wrote it (zero Terms: none)
	hbErr          error     // the last dispatcher heartbeat write failed with it (nil after a success)
	hbFailingSince time.Time // since when the writes fail
	handingOver    bool      // a graceful step-down of this term is ending its run
	clearOnEnd     bool      // the step-down ended the run: its heartbeat entry goes once the term has ended
	lastCause      error
	workers        map[registry.Status]int // counted while this process leads the queue
	progress       progress.Report         // the last progress check of the term's run
	stalledSince   time.Time               // when progress.Cause became what it is (zero: not stalled)
}

// Snapshot is what a Queue knows at one instant: the one record that Status, readiness, liveness,
// metrics, IsLeading and Term read.
type Snapshot[T Term] struct {
	Queue string
	// Leader is who etcd shows as the queue's leader (advisory; empty ID when nobody leads).
	Leader election.Leader
	// Term is this process's term, when HasTerm; Leading is true while it may act (Term.Check passes)
	// and Held while it has not ended (Term.Err is nil: past its deadline it may be held but not act).
	Term          T
	HasTerm       bool
	Leading, Held bool
	Run           takeover.Run // the chain's current run of the term
	Open          bool         // Run is open, as far as supervision knows
	NoRunSince    time.Time    // when the term last had no open run
	Takeovers     int          // successful takeovers of the queue by this process
	Replaced      int          // runs replaced after they closed behind this owner's back
	OpenedAt      time.Time    // when Run was opened by a takeover or a replacement
	// QuickCloses counts the runs in a row that failed (FAILED, TIMED_OUT) behind this owner's back
	// within RunFailingWithin of their start (a start hook or a first workflow task that fails every time),
	// and QuickClosedAt when the last did; a run that outlives RunFailingWithin ends the streak.
	QuickCloses      int
	QuickClosedAt    time.Time
	LastErr          error     // the last takeover or heartbeat failure
	Permanent        error     // a takeover failure that retrying cannot fix, until one succeeds
	Failing          Failing   // the queue's failing record as this process last wrote it (zero Terms: none)
	HeartbeatErr     error     // the last heartbeat write's failure (nil after a success)
	HeartbeatFailing time.Time // since when the heartbeat writes fail
	LastCause        error     // why this process's last term ended
	// Workers counts the queue's workers by status, as this process last saw them while leading.
	Workers map[registry.Status]int
	// Progress is the last progress check of the term's run (zero CheckedAt: none yet), and
	// StalledSince when its cause was first seen.
	Progress     progress.Report
	StalledSince time.Time
}

// Snapshot returns what the Queue knows now. It makes no network call.
func (q *Queue[T]) Snapshot() Snapshot[T] {
	q.mu.Lock()
	defer q.mu.Unlock()
	s := &q.st
	snap := Snapshot[T]{Queue: q.cfg.Queue, Leader: s.leader, Term: s.term, HasTerm: s.hasTerm, Run: s.run, Open: s.open,
		NoRunSince: s.noRunSince, Takeovers: s.takeovers, Replaced: s.replaced, OpenedAt: s.openedAt, QuickCloses: s.quickCloses,
		QuickClosedAt: s.quickClosedAt, LastErr: s.lastErr, Permanent: s.permanent,
		Failing:      s.failing,
		HeartbeatErr: s.hbErr, HeartbeatFailing: s.hbFailingSince, LastCause: s.lastCause, Workers: maps.Clone(s.workers),
		Progress: s.progress, StalledSince: s.stalledSince}
	if s.hasTerm {
		snap.Leading, snap.Held = s.term.Check() == nil, s.term.Err() == nil
	}
	return snap
}

// RunFailingWithin is how soon after its start a run that fails (closes FAILED or TIMED_OUT behind its
// owner's back) counts as one that fails to start (its start code or its first workflow task fails
// every time) rather than one a bug ended in the course of its work; an operator's terminate or
// cancel ends the streak. Two such closes in a row make the queue's
// runs failing (Snapshot.RunsFailing).
const RunFailingWithin = time.Minute

// RunsFailing reports whether the term's runs keep closing right after they start: two closes in a
// row within RunFailingWithin of their start, while this process holds the queue or within
// RunFailingWithin of the last close, and no run open for RunFailingWithin since.
func (s Snapshot[T]) RunsFailing(now time.Time) bool {
	switch {
	case s.QuickCloses < 2:
		return false
	case s.Open && now.Sub(s.OpenedAt) >= RunFailingWithin:
		return false
	}
	return s.Held || now.Sub(s.QuickClosedAt) < RunFailingWithin
}

// Leading returns this process's term while it may act (Term.Check passes): the local check, with
// no network call and no allocation.
func (q *Queue[T]) Leading() (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.st.hasTerm && q.st.term.Check() == nil {
		return q.st.term, true
	}
	var zero T
	return zero, false
}

package ownership

import (
	"errors"
	"fmt"
	"time"
)

// Errors of a queue's health verdicts (Snapshot.Wedged, Snapshot.Health). The root package exports
// them under the same names, as the Node's liveness and readiness errors; each verdict wraps one and
// names the queue.
var (
	// ErrWedgedLeader: a term of this process is still alive past its lease deadline (WedgedAfter):
	// the watchdog should have ended it, so the process cannot be trusted.
	ErrWedgedLeader = errors.New("baton: leading past the lease deadline")
	// ErrTakeoverFailing: the queue's takeover fails in a way that retrying cannot fix (namespace not
	// found, permission denied, invalid argument, an unreadable owner memo), until a takeover of the
	// queue succeeds.
	ErrTakeoverFailing = errors.New("baton: dispatcher takeover cannot succeed")
	// ErrNoDispatcher: this process leads the queue without an open dispatcher run for longer than
	// the grace (the run closed and could not be replaced yet).
	ErrNoDispatcher = errors.New("baton: leading without an open dispatcher run")
	// ErrDispatcherStalled: the run of a queue this process leads makes no progress, with the cause
	// its last progress check found (package progress).
	ErrDispatcherStalled = errors.New("baton: dispatcher run makes no progress")
	// ErrRunsFailing: the queue's runs keep closing right after they start (Snapshot.RunsFailing).
	ErrRunsFailing = errors.New("baton: dispatcher runs keep closing right after they start")
	// ErrHeartbeatFailing: the dispatcher heartbeat of a queue this process leads has failed for
	// longer than the grace (Redis unreachable, or refusing the write).
	ErrHeartbeatFailing = errors.New("baton: dispatcher heartbeats failing")
)

// WedgedAfter is how long past its deadline a term may take to end before its process counts as
// wedged: the watchdog ends terms at the deadline, so anything longer means it cannot run.
const WedgedAfter = time.Second

// Wedged returns an error wrapping ErrWedgedLeader when the snapshot's term is held more than
// WedgedAfter past its deadline at now, the one state a restart must end; nil otherwise.
func (s Snapshot[T]) Wedged(now time.Time) error {
	if !s.Held {
		return nil
	}
	if until := s.Term.ValidUntil(); now.After(until.Add(WedgedAfter)) {
		return fmt.Errorf("%w: queue %s: term %d still alive %v after its deadline", ErrWedgedLeader, s.Queue, s.Term.Token(),
			now.Sub(until).Round(time.Millisecond))
	}
	return nil
}

// Health returns the queue's readiness verdict at now, nil when healthy: a takeover that cannot
// succeed, runs that keep failing right after their start, and, while this process holds the queue,
// heartbeats failing or no open run for longer than grace (a takeover or a replacement under way
// takes a moment), or a run that makes no progress.
func (s Snapshot[T]) Health(now time.Time, grace time.Duration) error {
	q := s.Queue
	if s.Permanent != nil {
		if f := s.Failing; f.Terms > 0 {
			return fmt.Errorf("%w: queue %s (failing since %s, %d failed term(s) in a row): %w", ErrTakeoverFailing, q,
				f.Since.UTC().Format(time.RFC3339), f.Terms, s.Permanent)
		}
		return fmt.Errorf("%w: queue %s: %w", ErrTakeoverFailing, q, s.Permanent)
	}
	if s.RunsFailing(now) {
		return fmt.Errorf("%w: queue %s: %d runs in a row closed within %v of their start; the last: %v", ErrRunsFailing, q,
			s.QuickCloses, RunFailingWithin, s.LastErr)
	}
	switch {
	case !s.Held:
	case s.HeartbeatErr != nil && now.Sub(s.HeartbeatFailing) > grace:
		return fmt.Errorf("%w: queue %s for %v: %w", ErrHeartbeatFailing, q, now.Sub(s.HeartbeatFailing).Round(time.Millisecond), s.HeartbeatErr)
	case !s.Open && now.Sub(s.NoRunSince) > grace:
		return fmt.Errorf("%w: queue %s for %v: %v", ErrNoDispatcher, q, now.Sub(s.NoRunSince).Round(time.Millisecond), s.LastErr)
	case s.Open && s.Progress.Stalled():
		return fmt.Errorf("%w: queue %s: %s for %v: %s", ErrDispatcherStalled, q, s.Progress.Cause,
			now.Sub(s.StalledSince).Round(time.Millisecond), s.Progress.Detail)
	}
	return nil
}

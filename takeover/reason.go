package takeover

import (
	"fmt"
	"strings"
	"time"
)

// ReasonKind says which of Baton's terminations a Reason is.
type ReasonKind string

// The terminations Baton makes, each by a run-scoped terminate (the run's ID named).
const (
	// ReasonTakenOver: a successor (By, at Token, above the run owner's) took the queue over.
	ReasonTakenOver ReasonKind = "taken-over"
	// ReasonSteppedDown: the run's own term (By, at Token) stepped down gracefully.
	ReasonSteppedDown ReasonKind = "stepped-down"
	// ReasonLateStart: a takeover's term (By, at Token) ended while its start was on the way; it ended
	// the run it started.
	ReasonLateStart ReasonKind = "late-start"
	// ReasonStaleHeartbeat: the reconciler (By, at Token) found the heartbeat of Owner at OwnerToken
	// stale for Stale.
	ReasonStaleHeartbeat ReasonKind = "stale-heartbeat"
	// ReasonNoLiveOwner: the reconciler's sweep (By, at Token) found the run of Owner at OwnerToken
	// open without a live owner.
	ReasonNoLiveOwner ReasonKind = "no-live-owner"
)

// Reason is the reason of a termination Baton makes: who made it, under which token, and for the
// reconciler's, whose run it ended. Its String is the terminate's reason, for people (it starts with
// ReasonPrefix); ParseReason reads it back, so that tools and tests judge a termination by its fields,
// never by matching its text.
type Reason struct {
	Kind ReasonKind
	// By and Token are the terminating process (its server ID) and its term's token: the successor's,
	// the stepping-down or late-starting term's own, or the reconciler's.
	By    string
	Token int64
	// Owner and OwnerToken are the run's owner, for the reconciler's terminations.
	Owner      string
	OwnerToken int64
	// Stale is how long the owner's heartbeat had not been written (ReasonStaleHeartbeat).
	Stale time.Duration
}

// RunToken returns the token the reason says the terminated run's owner had, and whether it says:
// a step-down's and a late start's are the terminating term's own; the reconciler's name the owner's.
func (r Reason) RunToken() (int64, bool) {
	switch r.Kind {
	case ReasonSteppedDown, ReasonLateStart:
		return r.Token, true
	case ReasonStaleHeartbeat, ReasonNoLiveOwner:
		return r.OwnerToken, true
	}
	return 0, false
}

// String is the reason's text.
func (r Reason) String() string {
	switch r.Kind {
	case ReasonTakenOver:
		return fmt.Sprintf(ReasonPrefix+"taken over by %s (token %d)", r.By, r.Token)
	case ReasonSteppedDown:
		return fmt.Sprintf(ReasonPrefix+"%s stepped down (token %d)", r.By, r.Token)
	case ReasonLateStart:
		return fmt.Sprintf(ReasonPrefix+"started by %s at token %d after its term ended", r.By, r.Token)
	case ReasonStaleHeartbeat:
		return fmt.Sprintf(ReasonPrefix+"reconciler %s (token %d): heartbeat of %s (token %d) stale for %v",
			r.By, r.Token, r.Owner, r.OwnerToken, r.Stale.Round(time.Millisecond))
	case ReasonNoLiveOwner:
		return fmt.Sprintf(ReasonPrefix+"reconciler %s (token %d): run of %s (token %d) has no live owner",
			r.By, r.Token, r.Owner, r.OwnerToken)
	}
	return ReasonPrefix + string(r.Kind)
}

// ParseReason reads a termination reason back; ok is false for any text String does not produce (an
// operator's reason, a conflict policy's). Server IDs never contain spaces.
func ParseReason(s string) (r Reason, ok bool) {
	rest, found := strings.CutPrefix(s, ReasonPrefix)
	if !found {
		return Reason{}, false
	}
	scan := func(format string, kind ReasonKind, args ...any) bool {
		r = Reason{Kind: kind}
		n, err := fmt.Sscanf(rest, format, args...)
		return err == nil && n == len(args)
	}
	var stale string
	switch {
	case strings.HasPrefix(rest, "taken over by "):
		ok = scan("taken over by %s (token %d)", ReasonTakenOver, &r.By, &r.Token)
	case strings.HasPrefix(rest, "started by "):
		ok = scan("started by %s at token %d after its term ended", ReasonLateStart, &r.By, &r.Token)
	case strings.HasPrefix(rest, "reconciler ") && strings.HasSuffix(rest, " has no live owner"):
		ok = scan("reconciler %s (token %d): run of %s (token %d) has no live owner", ReasonNoLiveOwner,
			&r.By, &r.Token, &r.Owner, &r.OwnerToken)
	case strings.HasPrefix(rest, "reconciler "):
		ok = scan("reconciler %s (token %d): heartbeat of %s (token %d) stale for %s", ReasonStaleHeartbeat,
			&r.By, &r.Token, &r.Owner, &r.OwnerToken, &stale)
		if ok {
			d, err := time.ParseDuration(stale)
			r.Stale, ok = d, err == nil
		}
	case strings.HasSuffix(rest, ")") && strings.Contains(rest, " stepped down (token "):
		ok = scan("%s stepped down (token %d)", ReasonSteppedDown, &r.By, &r.Token)
	}
	// Read back only what String writes again, to the letter: nothing else is Baton's.
	if !ok || r.String() != s {
		return Reason{}, false
	}
	return r, true
}

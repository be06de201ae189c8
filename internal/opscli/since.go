package opscli

import (
	"fmt"
	"strconv"
	"time"
)

// since is the point verify -since judges from: a time, or an etcd revision. The zero value judges
// everything read.
type since struct {
	at  time.Time // zero unless given as a duration or a time
	rev int64     // 0 unless given as a revision
	raw string
}

// after reports whether something that happened at t, or at etcd revision rev, is after s. A
// dispatcher run's start is both: its time, and its owner's token (the leader's create revision).
func (s since) after(t time.Time, rev int64) bool {
	switch {
	case s.rev > 0:
		return rev > s.rev
	case !s.at.IsZero():
		return t.After(s.at)
	}
	return true
}

func (s since) String() string { return s.raw }

// sinceValue is the -since flag: a duration back from now, an RFC 3339 time or an etcd revision.
type sinceValue struct {
	p   *since
	now func() time.Time
}

func (v sinceValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.raw
}

func (v sinceValue) Set(s string) error {
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		*v.p = since{at: v.now().Add(-d), raw: s}
		return nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		*v.p = since{at: t, raw: s}
		return nil
	}
	if r, err := strconv.ParseInt(s, 10, 64); err == nil && r > 0 {
		*v.p = since{rev: r, raw: s}
		return nil
	}
	return fmt.Errorf("must be a positive duration (30m), an RFC 3339 time (2026-11-28T15:04:05Z) or an etcd revision (a positive integer), got %q", s)
}

package opscli

import (
	"testing"
	"time"
)

// -since takes a duration back from now, an RFC 3339 time or an etcd revision, and judges what
// happened after it: by time, or by revision (a run's owner token is its leader's create revision).
func TestSince(t *testing.T) {
	now := time.Date(2026, 11, 28, 15, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	for _, tc := range []struct {
		name, in     string
		at           time.Time
		rev          int64
		afterT       time.Time
		afterRev     int64
		after, wrong bool
	}{
		{name: "duration, later", in: "30m", at: now.Add(-30 * time.Minute), afterT: now.Add(-29 * time.Minute), after: true},
		{name: "duration, earlier", in: "30m", at: now.Add(-30 * time.Minute), afterT: now.Add(-31 * time.Minute)},
		{name: "time, at it", in: "2026-11-28T14:00:00Z", at: now.Add(-time.Hour), afterT: now.Add(-time.Hour)},
		{name: "time, later", in: "2026-11-28T14:00:00Z", at: now.Add(-time.Hour), afterT: now.Add(-time.Hour + time.Second), after: true},
		{name: "revision, later", in: "1200", rev: 1200, afterRev: 1201, afterT: now.Add(-24 * time.Hour), after: true},
		{name: "revision, at it", in: "1200", rev: 1200, afterRev: 1200, afterT: now},
		{name: "not a point", in: "yesterday", wrong: true},
		{name: "negative duration", in: "-5m", wrong: true},
		{name: "zero revision", in: "0", wrong: true},
	} {
		var s since
		err := sinceValue{&s, clock}.Set(tc.in)
		if tc.wrong {
			if err == nil {
				t.Errorf("%s: %q accepted as %+v", tc.name, tc.in, s)
			}
			continue
		}
		if err != nil || !s.at.Equal(tc.at) || s.rev != tc.rev || s.String() != tc.in {
			t.Errorf("%s: Set(%q) = %+v, %v", tc.name, tc.in, s, err)
			continue
		}
		if got := s.after(tc.afterT, tc.afterRev); got != tc.after {
			t.Errorf("%s: after(%v, %d) = %v, want %v", tc.name, tc.afterT, tc.afterRev, got, tc.after)
		}
	}
	if !(since{}).after(time.Time{}, 0) {
		t.Error("no -since must judge everything")
	}
}

package ownership

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/progress"
)

// Each verdict of a queue's health, on fixed times: which sentinel, and what the message names.
func TestHealthVerdicts(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	grace := time.Second
	held := Snapshot[*fakeTerm]{Queue: "orders", Held: true, Open: true, OpenedAt: now.Add(-time.Hour)}
	with := func(f func(*Snapshot[*fakeTerm])) Snapshot[*fakeTerm] {
		s := held
		f(&s)
		return s
	}
	for _, c := range []struct {
		name string
		s    Snapshot[*fakeTerm]
		want error
		says string
	}{
		{"healthy", held, nil, ""},
		{"not held: nothing to judge but the queue's own failures", Snapshot[*fakeTerm]{Queue: "orders"}, nil, ""},
		{"takeover cannot succeed", with(func(s *Snapshot[*fakeTerm]) { s.Permanent = errors.New("namespace not found") }),
			ErrTakeoverFailing, "namespace not found"},
		{"the fleet's failing record", with(func(s *Snapshot[*fakeTerm]) {
			s.Permanent, s.Failing = errors.New("denied"), Failing{Terms: 3, Since: now.Add(-time.Minute)}
		}), ErrTakeoverFailing, "3 failed term(s) in a row"},
		{"runs failing right after their start", with(func(s *Snapshot[*fakeTerm]) {
			s.QuickCloses, s.QuickClosedAt, s.Open = 2, now.Add(-time.Second), false
		}), ErrRunsFailing, "2 runs in a row"},
		{"heartbeats failing past the grace", with(func(s *Snapshot[*fakeTerm]) {
			s.HeartbeatErr, s.HeartbeatFailing = errors.New("NOPERM"), now.Add(-2*grace)
		}), ErrHeartbeatFailing, "NOPERM"},
		{"heartbeats failing within the grace", with(func(s *Snapshot[*fakeTerm]) {
			s.HeartbeatErr, s.HeartbeatFailing = errors.New("NOPERM"), now.Add(-grace/2)
		}), nil, ""},
		{"no run past the grace", with(func(s *Snapshot[*fakeTerm]) { s.Open, s.NoRunSince = false, now.Add(-2*grace) }),
			ErrNoDispatcher, "for 2s"},
		{"no run within the grace", with(func(s *Snapshot[*fakeTerm]) { s.Open, s.NoRunSince = false, now.Add(-grace/2) }), nil, ""},
		{"stalled", with(func(s *Snapshot[*fakeTerm]) {
			s.Progress, s.StalledSince = progress.Report{CheckedAt: now, Cause: progress.CauseNoPollers, Detail: "nobody polls"}, now.Add(-5*time.Second)
		}), ErrDispatcherStalled, "nobody polls"},
	} {
		err := c.s.Health(now, grace)
		switch {
		case c.want == nil && err != nil:
			t.Errorf("%s: %v, want healthy", c.name, err)
		case c.want != nil && (!errors.Is(err, c.want) || !strings.Contains(err.Error(), "queue orders") || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%s: %v, want %v naming the queue and %q", c.name, err, c.want, c.says)
		}
	}
}

// A term held past its deadline by more than WedgedAfter wedges the process; one that ended does not.
func TestWedged(t *testing.T) {
	term := newTerm(7)
	defer term.end(errors.New("test over"))
	until := term.ValidUntil()
	s := Snapshot[*fakeTerm]{Queue: "orders", Term: term, HasTerm: true, Held: true}
	if err := s.Wedged(until.Add(WedgedAfter / 2)); err != nil {
		t.Errorf("within WedgedAfter of the deadline: %v", err)
	}
	if err := s.Wedged(until.Add(2 * WedgedAfter)); !errors.Is(err, ErrWedgedLeader) || !strings.Contains(err.Error(), "term 7") {
		t.Errorf("past the deadline: %v, want ErrWedgedLeader naming term 7", err)
	}
	s.Held = false
	if err := s.Wedged(until.Add(time.Hour)); err != nil {
		t.Errorf("an ended term: %v", err)
	}
}

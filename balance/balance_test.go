package balance

import (
	"errors"
	"maps"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	ok := Config{Project: "p", ServerID: "s", Queues: []string{"a", "b"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid config: %v", err)
	}
	if c := ok.WithDefaults(); c.ShedAbove != 1.25 || c.ShedInterval != 20*time.Millisecond || c.MaxMoves != 10 {
		t.Fatalf("defaults %+v", c)
	}
	// The move cap grows with the queues (one in twenty per MoveWindow), and the pause between moves
	// shrinks so that the cap can be reached; set values are kept.
	many := Config{Project: "p", ServerID: "s", Queues: make([]string, 10000)}
	if c := many.WithDefaults(); c.MaxMoves != 500 || c.ShedInterval != 2*time.Millisecond {
		t.Fatalf("defaults for 10,000 queues: MaxMoves %d, ShedInterval %v; want 500, 2ms", c.MaxMoves, c.ShedInterval)
	}
	many.MaxMoves, many.ShedInterval = 3, 50*time.Millisecond
	if c := many.WithDefaults(); c.MaxMoves != 3 || c.ShedInterval != 50*time.Millisecond {
		t.Fatalf("set values changed: MaxMoves %d, ShedInterval %v", c.MaxMoves, c.ShedInterval)
	}
	with := func(f func(*Config)) Config { c := ok; c.Queues = append([]string(nil), ok.Queues...); f(&c); return c }
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no project", with(func(c *Config) { c.Project = "" }), "Project"},
		{"no server", with(func(c *Config) { c.ServerID = "" }), "ServerID"},
		{"no queues", with(func(c *Config) { c.Queues = nil }), "Queues"},
		{"bad queue", with(func(c *Config) { c.Queues[1] = "a/b" }), "Queues[1]"},
		{"duplicate queue", with(func(c *Config) { c.Queues[1] = "a" }), "Queues[1]"},
		{"shed below one", with(func(c *Config) { c.ShedAbove = 0.5 }), "ShedAbove"},
		{"negative interval", with(func(c *Config) { c.ShedInterval = -1 }), "ShedInterval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

// The view counts workers by server ID across keys, itself included although it stands nowhere, and
// tells whether others stand for a queue.
func TestView(t *testing.T) {
	v := newView("/e/p/", "self", []string{"a", "b"})
	v.apply("/e/p/a/1", "w1", 5, false)
	v.apply("/e/p/a/2", "w2", 3, false)
	v.apply("/e/p/b/1", "w1", 4, false)
	v.apply("/e/p/c/9", "w9", 1, false)     // not one of our queues
	v.apply("/e/other/a/3", "w3", 1, false) // another project
	if v.workers() != 3 || !v.othersStand("a", "w1") || v.othersStand("b", "w1") {
		t.Fatalf("workers %d, others on a %v, on b %v", v.workers(), v.othersStand("a", "w1"), v.othersStand("b", "w1"))
	}
	if v.leader("a") != "w2" || v.leader("b") != "w1" || v.leader("c") != "" {
		t.Fatalf("leaders a=%q b=%q c=%q", v.leader("a"), v.leader("b"), v.leader("c"))
	}
	if got := v.leaderCounts(); !maps.Equal(got, map[string]int{"w1": 1, "w2": 1}) {
		t.Fatalf("leader counts %v", got)
	}
	v.apply("/e/p/a/2", "", 0, true)
	if v.workers() != 2 || v.othersStand("a", "w1") || v.leader("a") != "w1" {
		t.Fatalf("after delete: workers %d, others on a %v", v.workers(), v.othersStand("a", "w1"))
	}
	if got := v.leaderCounts(); !maps.Equal(got, map[string]int{"w1": 2}) {
		t.Fatalf("leader counts after the delete %v", got)
	}
}

// A queue's waiters wake when its leader changes or this worker leads it, not for every candidate
// that steps in behind another worker's leader: at start-up that would be every key of every worker.
func TestViewWakesOnlyForDecisions(t *testing.T) {
	v := newView("/e/p/", "self", []string{"a", "b"})
	woken := func(queue string, change func()) bool {
		ch := v.changedFor(queue)
		change()
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	steps := []struct {
		name   string
		queue  string
		change func()
		want   bool
	}{
		{"a first candidate leads", "a", func() { v.apply("/e/p/a/1", "w1", 1, false) }, true},
		{"a candidate behind another worker's leader", "a", func() { v.apply("/e/p/a/2", "w2", 2, false) }, false},
		{"this worker behind another's leader", "a", func() { v.apply("/e/p/a/3", "self", 3, false) }, false},
		{"a candidate leaves the line", "a", func() { v.apply("/e/p/a/2", "", 0, true) }, false},
		{"the leader goes", "a", func() { v.apply("/e/p/a/1", "", 0, true) }, true},
		{"a candidate behind this worker's leader", "a", func() { v.apply("/e/p/a/4", "w4", 4, false) }, true},
		{"another queue's change", "b", func() { v.apply("/e/p/a/5", "w5", 5, false) }, false},
		{"a hint or the end of a takeover", "b", func() { v.wake("b") }, true},
	}
	for _, s := range steps {
		if got := woken(s.queue, s.change); got != s.want {
			t.Errorf("%s: woken %v, want %v", s.name, got, s.want)
		}
	}
}

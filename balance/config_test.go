package balance

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Every rule of Validate names its field and rejects the value at its edge, while the edge's other
// side passes; zero means the default everywhere, so a zero never fails. A bad MoveWindow is named
// as such, not as the ShedInterval default derived from it.
func TestConfigValidateEdges(t *testing.T) {
	base := Config{Project: "p", ServerID: "s", Queues: []string{"a"}}
	for _, tc := range []struct {
		name  string
		set   func(*Config)
		field string // "" when valid
	}{
		{"every default", func(*Config) {}, ""},
		{"ShedAbove exactly 1", func(c *Config) { c.ShedAbove = 1 }, ""},
		{"ShedAbove just under 1", func(c *Config) { c.ShedAbove = 0.999 }, "ShedAbove"},
		{"ShedInterval 1ns", func(c *Config) { c.ShedInterval = time.Nanosecond }, ""},
		{"Grace negative", func(c *Config) { c.Grace = -time.Nanosecond }, "Grace"},
		{"Grace 1ns", func(c *Config) { c.Grace = time.Nanosecond }, ""},
		{"Cooldown negative", func(c *Config) { c.Cooldown = -time.Nanosecond }, "Cooldown"},
		{"MaxMoves negative", func(c *Config) { c.MaxMoves = -1 }, "MaxMoves"},
		{"MaxMoves 1", func(c *Config) { c.MaxMoves = 1 }, ""},
		{"MoveWindow negative", func(c *Config) { c.MoveWindow = -time.Second }, "MoveWindow"},
		{"Settle negative", func(c *Config) { c.Settle = -time.Nanosecond }, "Settle"},
		{"VacantWait negative", func(c *Config) { c.VacantWait = -time.Nanosecond }, "VacantWait"},
		{"a version", func(c *Config) { c.Version = "v1.2.3" }, ""},
		{"a version with a space", func(c *Config) { c.Version = "v1 2" }, "Version"},
		{"a queue name with a slash", func(c *Config) { c.Queues = []string{"a/b"} }, "Queues[0]"},
		{"a project name with a slash", func(c *Config) { c.Project = "p/q" }, "Project"},
		{"the same queue twice, far apart", func(c *Config) { c.Queues = []string{"a", "b", "c", "a"} }, "Queues[3]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.set(&c)
			err := c.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Fatalf("Validate() = %v, want nil", err)
			case tc.field != "" && (!errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field)):
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
		})
	}
}

// The pause between moves is derived so that the move cap can be reached within its window, and a
// set value is kept.
func TestConfigShedIntervalDerived(t *testing.T) {
	for _, tc := range []struct {
		name      string
		c         Config
		interval  time.Duration
		maxMoves  int
		cooldown  time.Duration
		vacancy   time.Duration
		queuesFor int
	}{
		{"a few queues", Config{}, 20 * time.Millisecond, 10, 5 * time.Second, time.Second, 3},
		{"200 queues: still 10 a second", Config{}, 20 * time.Millisecond, 10, 5 * time.Second, time.Second, 200},
		{"400 queues: 20 a second", Config{}, 20 * time.Millisecond, 20, 5 * time.Second, time.Second, 400},
		{"1,000 queues: 50 a second, 20ms apart just fits", Config{}, 20 * time.Millisecond, 50, 5 * time.Second, time.Second, 1000},
		{"4,000 queues: 200 a second, 5ms apart", Config{}, 5 * time.Millisecond, 200, 5 * time.Second, time.Second, 4000},
		{"a wider window", Config{MoveWindow: 10 * time.Second, MaxMoves: 100}, 20 * time.Millisecond, 100, 5 * time.Second, time.Second, 3},
		{"a narrow window", Config{MoveWindow: 100 * time.Millisecond, MaxMoves: 10}, 10 * time.Millisecond, 10, 5 * time.Second, time.Second, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.c.Queues = queueNames(tc.queuesFor)
			got := tc.c.WithDefaults()
			if got.ShedInterval != tc.interval || got.MaxMoves != tc.maxMoves || got.Cooldown != tc.cooldown || got.VacantWait != tc.vacancy {
				t.Fatalf("ShedInterval %v, MaxMoves %d, Cooldown %v, VacantWait %v; want %v, %d, %v, %v",
					got.ShedInterval, got.MaxMoves, got.Cooldown, got.VacantWait, tc.interval, tc.maxMoves, tc.cooldown, tc.vacancy)
			}
		})
	}
}

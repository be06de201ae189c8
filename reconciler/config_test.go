package reconciler

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{Project: "billing", ServerID: "a"}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	c = c.WithDefaults()
	if c.Interval != time.Minute || c.StaleAfter != 30*time.Second || c.ScanCount != 1000 || c.TerminateRate != 20 ||
		c.TerminateBurst != 5 || c.Prefix != "dispatcher:heartbeat:" {
		t.Fatalf("defaults: %+v", c)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Project: "billing", ServerID: "a"}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	cases := []struct {
		name  string
		cfg   Config
		field string
		rule  string
	}{
		{"no project", with(func(c *Config) { c.Project = "" }), "Project", "must not be empty"},
		{"project with slash", with(func(c *Config) { c.Project = "a/b" }), "Project", "'/'"},
		{"no server id", with(func(c *Config) { c.ServerID = "" }), "ServerID", "must not be empty"},
		{"glob prefix", with(func(c *Config) { c.Prefix = "x*" }), "Prefix", "glob"},
		{"interval too short", with(func(c *Config) { c.Interval = time.Millisecond }), "Interval", "at least 100ms"},
		{"negative stale", with(func(c *Config) { c.StaleAfter = -time.Second }), "StaleAfter", "at least 100ms"},
		{"scan count tiny", with(func(c *Config) { c.ScanCount = 1 }), "ScanCount", "between 10 and 100000"},
		{"negative rate", with(func(c *Config) { c.TerminateRate = -1 }), "TerminateRate", "positive"},
		{"negative burst", with(func(c *Config) { c.TerminateBurst = -1 }), "TerminateBurst", "at least 1"},
		{"negative timeout", with(func(c *Config) { c.CallTimeout = -1 }), "CallTimeout", "positive"},
		{"too many workers", with(func(c *Config) { c.Workers = 65 }), "Workers", "between 1 and 64"},
		{"sweep page too large", with(func(c *Config) { c.SweepPageSize = 1001 }), "SweepPageSize", "between 1 and 1000"},
		{"negative sweep page", with(func(c *Config) { c.SweepPageSize = -1 }), "SweepPageSize", "between 1 and 1000"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field+" ") || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s and %q", err, tc.field, tc.rule)
			}
		})
	}
}

func TestNewRejectsMissingClients(t *testing.T) {
	if _, err := New(Config{Project: "p", ServerID: "s"}, nil, nil, nil); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("New(nil...) = %v", err)
	}
}

// A report with an error survives a JSON round trip (operators read it from /status).
func TestReportJSON(t *testing.T) {
	in := Report{Token: 7, Stale: 2, Err: ErrNotLeader, Error: ErrNotLeader.Error()}
	data, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Report
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("unmarshal %s: %v", data, err)
	}
	if out.Token != 7 || out.Stale != 2 || out.Error != ErrNotLeader.Error() {
		t.Fatalf("round trip %s -> %+v", data, out)
	}
}

package election

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDefaultConfig(t *testing.T) {
	c := DefaultConfig()
	if c.Prefix != "/baton/election" || c.TTL != 10*time.Second || c.SafetyMargin != 2500*time.Millisecond ||
		c.KeepAliveInterval != 10*time.Second/3 || c.RetryMin != 100*time.Millisecond || c.RetryMax != 5*time.Second {
		t.Fatalf("unexpected defaults: %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	// Derived defaults follow a configured TTL.
	c = Config{TTL: 4 * time.Second}.withDefaults()
	if c.SafetyMargin != time.Second || c.KeepAliveInterval != 4*time.Second/3 {
		t.Fatalf("margin and interval must derive from TTL: %+v", c)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name  string
		cfg   Config
		field string
		rule  string
	}{
		{"ttl below etcd minimum", Config{TTL: time.Second}, "TTL", "at least 2s"},
		{"negative ttl", Config{TTL: -time.Second}, "TTL", "at least 2s"},
		{"fractional ttl", Config{TTL: 2500 * time.Millisecond}, "TTL", "whole number of seconds"},
		{"margin half the ttl", Config{TTL: 4 * time.Second, SafetyMargin: 2 * time.Second}, "SafetyMargin", "less than TTL/2"},
		{"negative margin", Config{SafetyMargin: -time.Millisecond}, "SafetyMargin", "must be positive"},
		{"keepalive too slow", Config{TTL: 4 * time.Second, KeepAliveInterval: 2 * time.Second}, "KeepAliveInterval", "two keepalives"},
		{"negative keepalive", Config{KeepAliveInterval: -1}, "KeepAliveInterval", "must be positive"},
		{"retry min above interval", Config{RetryMin: 4 * time.Second}, "RetryMin", "less than KeepAliveInterval"},
		{"retry max below min", Config{RetryMin: time.Second, RetryMax: 500 * time.Millisecond}, "RetryMax", "at least RetryMin"},
		{"negative resign timeout", Config{ResignTimeout: -time.Second}, "ResignTimeout", "must be positive"},
		{"negative hand-over timeout", Config{HandOverTimeout: -time.Second}, "HandOverTimeout", "must be positive"},
		{"negative campaign request bound", Config{MaxCampaignRequests: -1}, "MaxCampaignRequests", "must be at least 1"},
		{"negative hand-over bound", Config{MaxHandOvers: -1}, "MaxHandOvers", "must be at least 1"},
		{"prefix trailing slash", Config{Prefix: "/baton/"}, "Prefix", "must not end with '/'"},
		{"prefix control char", Config{Prefix: "/ba\x00ton"}, "Prefix", "control characters"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tc.field+" ") || !strings.Contains(err.Error(), tc.rule) {
				t.Fatalf("Validate() = %q, want it to name %s and %q", err, tc.field, tc.rule)
			}
		})
	}
}

// A graceful stop's budget: the hand-over of every term at once, its two later steps, and the lease's
// revoke; HandOverTimeout follows ResignTimeout unless it is set.
func TestStopBudget(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want time.Duration
	}{
		{Config{}, 8 * time.Second},
		{Config{ResignTimeout: time.Second}, 4 * time.Second},
		{Config{HandOverTimeout: 6 * time.Second}, 12 * time.Second},
	} {
		if got := tc.cfg.StopBudget(); got != tc.want {
			t.Errorf("%+v: StopBudget() = %v, want %v", tc.cfg, got, tc.want)
		}
	}
}

func TestNewRejectsNilClient(t *testing.T) {
	_, err := New(nil, Config{})
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "client") {
		t.Fatalf("New(nil) = %v", err)
	}
}

func TestValidateName(t *testing.T) {
	for _, v := range []string{"", "a/b", "a\nb", strings.Repeat("x", 201)} {
		err := ValidateName("queue", v)
		if !errors.Is(err, ErrInvalidName) || !strings.Contains(err.Error(), "queue") {
			t.Errorf("ValidateName(queue, %q) = %v", v, err)
		}
	}
	if err := ValidateName("project", "billing"); err != nil {
		t.Fatal(err)
	}
}

package baton

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

func valid() Config {
	return Config{Project: "billing", Queues: []string{"orders", "invoices"}, ServerID: "host-1-1-ab12"}
}

func TestConfigDefaults(t *testing.T) {
	c := valid()
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults must validate: %v", err)
	}
	c = c.withDefaults()
	if c.Heartbeat.Interval != 10*time.Second || c.Reconciler.Interval != time.Minute || c.Reconciler.StaleAfter != 30*time.Second ||
		c.Registry.HeartbeatInterval != 10*time.Second || c.ReconcilerElectionPrefix != "/baton/reconciler" ||
		c.Heartbeat.KeyTTL != time.Hour || c.MaxConcurrency != 100 || len(c.Capabilities) != 1 || c.Capabilities[0] != takeover.DefaultWorkflowType {
		t.Fatalf("defaults: %+v", c)
	}
	if c.Reconciler.Project != "billing" || c.Reconciler.ServerID != "host-1-1-ab12" || c.Registry.Project != "billing" {
		t.Fatalf("project and server ID must reach the components: %+v %+v", c.Reconciler, c.Registry)
	}
	// The root composes the components' defaults rather than restating them: every default a
	// component defines is what a Node gets, the Node's own values aside.
	hb, rc, rg := heartbeat.DefaultConfig(), reconciler.DefaultConfig(), registry.DefaultConfig()
	if c.Heartbeat.Interval != hb.Interval || c.Heartbeat.Timeout != hb.Timeout || c.Reconciler.Interval != rc.Interval ||
		c.Reconciler.StaleAfter != rc.StaleAfter || c.Reconciler.OrphanGrace != rc.OrphanGrace || c.Reconciler.Workers != rc.Workers ||
		c.Registry.HeartbeatInterval != rg.HeartbeatInterval || c.Registry.EvictAfter != rg.EvictAfter || c.Registry.Retention != rg.Retention {
		t.Fatalf("the Node's defaults differ from the components': %+v %+v %+v", c.Heartbeat, c.Reconciler, c.Registry)
	}
	tk := takeover.DefaultConfig()
	if c.Takeover.MaxAttempts != tk.MaxAttempts ||
		c.Takeover.WorkflowTaskTimeout != tk.WorkflowTaskTimeout || c.Takeover.QuiesceTimeout != tk.QuiesceTimeout ||
		c.Takeover.RetryMin != tk.RetryMin || c.Takeover.RetryMax != tk.RetryMax || c.Takeover.SignalName != tk.SignalName {
		t.Fatalf("the Node's takeover defaults differ from takeover's: %+v", c.Takeover)
	}
	if c.Ownership != ownership.DefaultSettings() {
		t.Fatalf("the Node's ownership settings %+v differ from ownership's defaults %+v", c.Ownership, ownership.DefaultSettings())
	}
	// The progress checks judge a task stuck by the task timeout the takeovers start runs with.
	if pc := (progress.Config{WorkflowTaskTimeout: tk.WorkflowTaskTimeout}).WithDefaults(); c.Progress != pc {
		t.Fatalf("the Node's progress defaults %+v differ from progress's for Takeover.WorkflowTaskTimeout %v: %+v (the interval is the heartbeat's, 10s)",
			c.Progress, tk.WorkflowTaskTimeout, pc)
	}
	// A longer task timeout stretches what counts as stuck: a healthy 60 s task is not reported.
	long := Config{Project: "p", ServerID: "s", Queues: []string{"q"}, Takeover: takeover.Config{WorkflowTaskTimeout: time.Minute}}.withDefaults()
	if long.Progress.TaskStuckAfter != 2*time.Minute {
		t.Fatalf("Progress.TaskStuckAfter %v with a 1m task timeout, want 2m", long.Progress.TaskStuckAfter)
	}
	// A planned move quiesces inside the election's hand-over: the hand-over gets the quiesce's whole
	// bound and the terminate's, and a longer quiesce stretches it (and the stop budget) with it.
	if got, want := c.Election.HandOverTimeout, tk.QuiesceTimeout+takeover.StepDownReserve; got != want {
		t.Fatalf("Election.HandOverTimeout %v, want Takeover.QuiesceTimeout + StepDownReserve = %v", got, want)
	}
	c = valid()
	c.Takeover.QuiesceTimeout = 20 * time.Second
	checked, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := checked.StopBudget(), 21*time.Second+3*election.DefaultConfig().ResignTimeout; got != want {
		t.Fatalf("StopBudget %v with a 20s quiesce, want %v", got, want)
	}
	c.Takeover.QuiesceTimeout = -1 // no quiesce: the election's own default is enough
	if got := c.withDefaults().Election.HandOverTimeout; got != election.DefaultConfig().HandOverTimeout {
		t.Fatalf("Election.HandOverTimeout %v without a quiesce", got)
	}
	c.Election.ResignTimeout = 10 * time.Second // a longer resign keeps the hand-over it gave before
	if got := c.withDefaults().Election.HandOverTimeout; got != 10*time.Second {
		t.Fatalf("Election.HandOverTimeout %v with a 10s ResignTimeout", got)
	}
	// A longer reconcile interval stretches the backstop TTL with it.
	c = valid()
	c.Reconciler.Interval = time.Hour
	if got := c.withDefaults().Heartbeat.KeyTTL; got != 2*(30*time.Second+2*time.Hour) {
		t.Fatalf("KeyTTL %v", got)
	}
}

func TestDefaultServerID(t *testing.T) {
	a, b := DefaultServerID(), DefaultServerID()
	if a == b {
		t.Fatalf("two server IDs of one process must differ: %s", a)
	}
	c := valid()
	c.ServerID = ""
	if err := c.Validate(); err != nil {
		t.Fatalf("the default server ID must be a valid name: %v", err)
	}
}

func TestConfigValidateNamesTheField(t *testing.T) {
	with := func(f func(*Config)) Config { c := valid(); f(&c); return c }
	cases := []struct {
		name  string
		cfg   Config
		field string
		rule  string
	}{
		{"no project", with(func(c *Config) { c.Project = "" }), "Project", "must not be empty"},
		{"project with space", with(func(c *Config) { c.Project = "a b" }), "Project", "white space"},
		{"no queues", with(func(c *Config) { c.Queues = nil }), "Queues", "at least one"},
		{"bad queue", with(func(c *Config) { c.Queues = []string{"ok", "a/b"} }), "Queues[1]", "'/'"},
		{"duplicate queue", with(func(c *Config) { c.Queues = []string{"a", "a"} }), "Queues[1]", "twice"},
		{"bad server id", with(func(c *Config) { c.ServerID = "x\ny" }), "ServerID", "control"},
		{"max concurrency", with(func(c *Config) { c.MaxConcurrency = -1 }), "MaxConcurrency", "at least 1"},
		{"election ttl", with(func(c *Config) { c.Election.TTL = time.Second }), "Election.TTL", "must be at least 2s"},
		{"long election ttl", with(func(c *Config) { c.Election.TTL = 1000 * time.Hour }), "Election.TTL", "AllowLongTTL"},
		{"takeover attempts", with(func(c *Config) { c.Takeover.MaxAttempts = -1 }), "Takeover.MaxAttempts", "must"},
		{"workflow task timeout", with(func(c *Config) { c.Takeover.WorkflowTaskTimeout = 100 * time.Millisecond }),
			"Takeover.WorkflowTaskTimeout", "must be from 1s to 2m0s"},
		{"no replacements", with(func(c *Config) { c.Ownership.MaxReplacements = -1 }), "Ownership.MaxReplacements", "must be at least 1"},
		{"hold cap below the hold", with(func(c *Config) {
			c.Ownership = ownership.Settings{PermanentHold: time.Minute, PermanentHoldMax: 30 * time.Second}
		}),
			"Ownership.PermanentHoldMax", "at least PermanentHold (1m0s)"},
		// The hold spans two components: a held term retries its takeover with the takeover's backoff.
		{"hold shorter than a retry", with(func(c *Config) { c.Takeover.RetryMax = 10 * time.Second; c.Ownership.PermanentHold = 5 * time.Second }),
			"Ownership.PermanentHold", "at least Takeover.RetryMax (10s)"},
		{"heartbeat interval", with(func(c *Config) { c.Heartbeat.Interval = time.Millisecond }), "Heartbeat.Interval", "must be at least 100ms"},
		{"reconciler rate", with(func(c *Config) { c.Reconciler.TerminateRate = -1 }), "Reconciler.TerminateRate", "must"},
		{"registry evict", with(func(c *Config) { c.Registry.EvictAfter = time.Second }), "Registry.EvictAfter", "must"},
		{"empty capability", with(func(c *Config) { c.Capabilities = []string{""} }), "Capabilities[0]", "must not be empty"},
		{"same election prefixes", with(func(c *Config) { c.ReconcilerElectionPrefix = "/baton/election" }), "ReconcilerElectionPrefix", "must differ"},
		{"stale below two heartbeats", with(func(c *Config) { c.Reconciler.StaleAfter = 15 * time.Second }), "Reconciler.StaleAfter", "2 × Heartbeat.Interval"},
		{"hand-over shorter than the quiesce", with(func(c *Config) { c.Election.HandOverTimeout = 5 * time.Second }), "Election.HandOverTimeout", "at least Takeover.QuiesceTimeout + 1s (6s)"},
		// A project the registry cannot use is the Project's fault, not the Registry's.
		{"project with a hash tag", with(func(c *Config) { c.Project = "a{b}" }), "Project", "hash tag"},
		// Fields the Node sets itself are refused rather than silently overwritten.
		{"balance queues", with(func(c *Config) { c.Balance.Queues = []string{"other"} }), "Balance.Queues", "set by the Node from Queues"},
		{"balance project", with(func(c *Config) { c.Balance.Project = "other" }), "Balance.Project", "set by the Node from Project"},
		{"balance server id", with(func(c *Config) { c.Balance.ServerID = "other" }), "Balance.ServerID", "set by the Node from ServerID"},
		{"balance version", with(func(c *Config) { c.Version = "1.2.0"; c.Balance.Version = "1.1.0" }), "Balance.Version", "set by the Node from Version"},
		{"reconciler project", with(func(c *Config) { c.Reconciler.Project = "other" }), "Reconciler.Project", "set by the Node from Project"},
		{"reconciler server id", with(func(c *Config) { c.Reconciler.ServerID = "other" }), "Reconciler.ServerID", "set by the Node from ServerID"},
		{"reconciler prefix", with(func(c *Config) { c.Reconciler.Prefix = "x:" }), "Reconciler.Prefix", "set by the Node from Heartbeat.Prefix"},
		{"registry project", with(func(c *Config) { c.Registry.Project = "other" }), "Registry.Project", "set by the Node from Project"},
		{"key ttl too short", with(func(c *Config) { c.Heartbeat.KeyTTL = 2 * time.Minute }), "Heartbeat.KeyTTL", "must exceed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			// One field path, one prefix: "baton: invalid config: Election.TTL must ...".
			msg := err.Error()
			if !strings.HasPrefix(msg, ErrInvalidConfig.Error()+": "+tc.field+" ") || !strings.Contains(msg, tc.rule) ||
				strings.Count(msg, "invalid") != 1 {
				t.Fatalf("Validate() = %q, want %q followed by %s and %q", err, ErrInvalidConfig.Error()+": ", tc.field, tc.rule)
			}
			// The same, typed: a caller never parses the text.
			var bad *configerr.Error
			if !errors.As(err, &bad) || bad.Field != tc.field || !strings.Contains(bad.Rule, tc.rule) {
				t.Fatalf("errors.As(%v) gives %+v, want field %s and a rule with %q", err, bad, tc.field, tc.rule)
			}
		})
	}
	// What Node.Config reports, the Node's own values in its fields included, is accepted back.
	if err := valid().withDefaults().Validate(); err != nil {
		t.Fatalf("a Config with its defaults applied must validate: %v", err)
	}
	// A sub-package's error still matches its own sentinel.
	if err := with(func(c *Config) { c.Election.TTL = time.Second }).Validate(); !errors.Is(err, election.ErrInvalidConfig) {
		t.Fatalf("Validate() = %v, want it to match election.ErrInvalidConfig", err)
	}
	// Disabled components are not validated.
	c := with(func(c *Config) { c.Reconciler.TerminateRate = -1; c.DisableReconciler = true })
	if err := c.Validate(); err != nil {
		t.Fatalf("a disabled reconciler's config must not matter: %v", err)
	}
}

func TestNewRefusesMissingClients(t *testing.T) {
	if _, err := New(valid(), nil, nil, nil); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "etcd client") {
		t.Fatalf("New(nil clients) = %v", err)
	}
}

func env(m map[string]string) (func(string) (string, bool), []string) {
	var environ []string
	for k, v := range m {
		environ = append(environ, k+"="+v)
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }, environ
}

func TestLoadEnv(t *testing.T) {
	lookup, environ := env(map[string]string{
		"BATON_PROJECT": "billing", "BATON_QUEUES": " orders, invoices ,", "BATON_SERVER_ID": "w1",
		"BATON_ELECTION_TTL": "4s", "BATON_HEARTBEAT_INTERVAL": "2s", "BATON_RECONCILE_STALE_AFTER": "6s",
		"BATON_RECONCILE_INTERVAL": "30s", "BATON_DISPATCHER_START_MODE": "signal-with-start",
		"BATON_DISPATCHER_STEP_DOWN": "leave", "BATON_LABELS": "zone=a, tier = gold", "BATON_MAX_CONCURRENCY": "8",
		"BATON_REGISTRY_DISABLED": "true", "BATON_RECONCILE_TERMINATE_RATE": "2.5",
		"BATON_DISPATCHER_WORKFLOW_TASK_TIMEOUT": "3s",
		"BATON_ETCD_ENDPOINTS":                   "http://x:2379", // another part's variable, passed in ignore
	})
	c, err := loadEnv(Config{}, lookup, environ, []string{"BATON_ETCD_ENDPOINTS"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Project != "billing" || len(c.Queues) != 2 || c.Queues[1] != "invoices" || c.Election.TTL != 4*time.Second ||
		c.Heartbeat.Interval != 2*time.Second || c.Reconciler.StaleAfter != 6*time.Second || c.Takeover.Mode != takeover.StartSignalWithStart ||
		c.Takeover.StepDown != takeover.LeaveRunning || c.Labels["tier"] != "gold" || c.MaxConcurrency != 8 || !c.DisableRegistry ||
		c.Reconciler.TerminateRate != 2.5 || c.Takeover.WorkflowTaskTimeout != 3*time.Second {
		t.Fatalf("loaded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("loaded config must validate: %v", err)
	}
}

func TestLoadEnvRefusesBadValues(t *testing.T) {
	cases := map[string][2]string{
		"BATON_ELECTION_TTL":                     {"ten", "Election.TTL"},
		"BATON_HEARTBEAT_INTERVAL":               {"-1s", "must be positive"},
		"BATON_MAX_CONCURRENCY":                  {"many", "MaxConcurrency"},
		"BATON_DISPATCHER_START_MODE":            {"fast", "execute or signal-with-start"},
		"BATON_LABELS":                           {"novalue", "key=value"},
		"BATON_REGISTRY_DISABLED":                {"maybe", "true or false"},
		"BATON_QUEUS":                            {"typo", "not a Baton setting"},
		"BATON_QUEUES":                           {" , ", "unset it to keep the queues set in code"},
		"BATON_HEARTBEAT_KEY_TTL":                {"3000000h", "out of range"},
		"BATON_DISPATCHER_WORKFLOW_TASK_TIMEOUT": {"0s", "must be positive"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			lookup, environ := env(map[string]string{name: c[0]})
			_, err := loadEnv(Config{}, lookup, environ, nil)
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), c[1]) {
				t.Fatalf("loadEnv(%s=%s) = %v, want an error naming it and %q", name, c[0], err, c[1])
			}
		})
	}
}

func TestCheckAppliesDefaultsOnceAndNewCheckedNeedsIt(t *testing.T) {
	c := valid()
	c.ServerID = ""
	checked, err := c.Check()
	if err != nil {
		t.Fatal(err)
	}
	if got := checked.Config(); got.ServerID == "" || got.Heartbeat.Interval != 10*time.Second {
		t.Fatalf("checked config without its defaults: %+v", got)
	}
	if _, err := NewChecked(CheckedConfig{}, nil, nil, nil); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "not checked") {
		t.Fatalf("NewChecked(unchecked) = %v, want ErrInvalidConfig", err)
	}
}

// A TTL past the takeover SLA is refused unless the operator says so explicitly.
func TestLongTTLNeedsItsOwnSwitch(t *testing.T) {
	lookup, environ := env(map[string]string{"BATON_ELECTION_TTL": "1000h"})
	c, err := loadEnv(valid(), lookup, environ, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "AllowLongTTL") {
		t.Fatalf("TTL 1000h without the switch: %v, want refused naming AllowLongTTL", err)
	}
	lookup, environ = env(map[string]string{"BATON_ELECTION_TTL": "1000h", "BATON_ELECTION_ALLOW_LONG_TTL": "true"})
	if c, err = loadEnv(valid(), lookup, environ, nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("TTL 1000h with BATON_ELECTION_ALLOW_LONG_TTL=true: %v, want accepted", err)
	}
}

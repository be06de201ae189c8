package baton

import (
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/names"
	"github.com/baton-run/baton/takeover"
)

// EnvPrefix starts every environment variable LoadEnv reads.
const EnvPrefix = "BATON_"

// ClientEnvPrefixes returns the namespaces of the BATON_* variables that say how to reach the
// servers: clients.LoadEnv reads them, and refuses unknown ones. LoadEnv leaves them alone, and
// the dev stack's own (BATON_DEVSTACK_*) too, so that one environment, or the dev stack's env file,
// serves both loaders.
func ClientEnvPrefixes() []string {
	return []string{"BATON_ETCD_", "BATON_TEMPORAL_", "BATON_REDIS_"}
}

// devstackEnvPrefix names what integration/tools/cmd/devstack writes into its env file beside the client
// variables.
const devstackEnvPrefix = "BATON_DEVSTACK_"

// The environment variables LoadEnv reads, and the Config field each sets. Durations use Go's
// syntax (10s, 1m30s); lists are comma-separated; labels are key=value pairs, comma-separated.
var envVars = []envVar{
	{"BATON_PROJECT", "Project", func(c *Config, v string) error { c.Project = v; return nil }},
	{"BATON_QUEUES", "Queues", func(c *Config, v string) error {
		q := splitList(v)
		if len(q) == 0 {
			// Set but empty would wipe the queues set in code, and the worker would serve nothing.
			return fmt.Errorf("is set but names no queue: unset it to keep the queues set in code, or name at least one, got %s", names.Quote(v))
		}
		c.Queues = q
		return nil
	}},
	{"BATON_SERVER_ID", "ServerID", func(c *Config, v string) error { c.ServerID = v; return nil }},
	{"BATON_VERSION", "Version", func(c *Config, v string) error { c.Version = v; return nil }},
	{"BATON_CAPABILITIES", "Capabilities", func(c *Config, v string) error { c.Capabilities = splitList(v); return nil }},
	{"BATON_LABELS", "Labels", func(c *Config, v string) (err error) { c.Labels, err = parseLabels(v); return err }},
	{"BATON_MAX_CONCURRENCY", "MaxConcurrency", intVar(func(c *Config) *int { return &c.MaxConcurrency })},
	{"BATON_ELECTION_PREFIX", "Election.Prefix", func(c *Config, v string) error { c.Election.Prefix = v; return nil }},
	{"BATON_ELECTION_TTL", "Election.TTL", durVar(func(c *Config) *time.Duration { return &c.Election.TTL })},
	{"BATON_ELECTION_ALLOW_LONG_TTL", "Election.AllowLongTTL", boolVar(func(c *Config) *bool { return &c.Election.AllowLongTTL })},
	{"BATON_ELECTION_SAFETY_MARGIN", "Election.SafetyMargin", durVar(func(c *Config) *time.Duration { return &c.Election.SafetyMargin })},
	{"BATON_DISPATCHER_WORKFLOW_TYPE", "Takeover.WorkflowType", func(c *Config, v string) error { c.Takeover.WorkflowType = v; return nil }},
	{"BATON_DISPATCHER_TASK_QUEUE", "Takeover.TaskQueue", func(c *Config, v string) error { c.Takeover.TaskQueue = v; return nil }},
	{"BATON_DISPATCHER_START_MODE", "Takeover.Mode", func(c *Config, v string) error {
		switch v {
		case "execute":
			c.Takeover.Mode = takeover.StartExecute
		case "signal-with-start":
			c.Takeover.Mode = takeover.StartSignalWithStart
		default:
			return fmt.Errorf("must be execute or signal-with-start, got %s", names.Quote(v))
		}
		return nil
	}},
	{"BATON_DISPATCHER_STEP_DOWN", "Takeover.StepDown", func(c *Config, v string) error {
		switch v {
		case "terminate":
			c.Takeover.StepDown = takeover.TerminateOwnRun
		case "leave":
			c.Takeover.StepDown = takeover.LeaveRunning
		default:
			return fmt.Errorf("must be terminate or leave, got %s", names.Quote(v))
		}
		return nil
	}},
	{"BATON_DISPATCHER_WORKFLOW_TASK_TIMEOUT", "Takeover.WorkflowTaskTimeout", durVar(func(c *Config) *time.Duration { return &c.Takeover.WorkflowTaskTimeout })},
	{"BATON_HEARTBEAT_PREFIX", "Heartbeat.Prefix", func(c *Config, v string) error { c.Heartbeat.Prefix = v; return nil }},
	{"BATON_HEARTBEAT_INTERVAL", "Heartbeat.Interval", durVar(func(c *Config) *time.Duration { return &c.Heartbeat.Interval })},
	{"BATON_HEARTBEAT_KEY_TTL", "Heartbeat.KeyTTL", durVar(func(c *Config) *time.Duration { return &c.Heartbeat.KeyTTL })},
	{"BATON_PROGRESS_DISABLED", "Progress.Disabled", boolVar(func(c *Config) *bool { return &c.Progress.Disabled })},
	{"BATON_PROGRESS_INTERVAL", "Progress.Interval", durVar(func(c *Config) *time.Duration { return &c.Progress.Interval })},
	{"BATON_PROGRESS_TASK_STUCK_AFTER", "Progress.TaskStuckAfter", durVar(func(c *Config) *time.Duration { return &c.Progress.TaskStuckAfter })},
	{"BATON_PROGRESS_PENDING_MAX", "Progress.PendingMax", durVar(func(c *Config) *time.Duration { return &c.Progress.PendingMax })},
	{"BATON_RECONCILE_INTERVAL", "Reconciler.Interval", durVar(func(c *Config) *time.Duration { return &c.Reconciler.Interval })},
	{"BATON_RECONCILE_STALE_AFTER", "Reconciler.StaleAfter", durVar(func(c *Config) *time.Duration { return &c.Reconciler.StaleAfter })},
	{"BATON_RECONCILE_TERMINATE_RATE", "Reconciler.TerminateRate", floatVar("terminations per second", func(c *Config) *float64 { return &c.Reconciler.TerminateRate })},
	{"BATON_RECONCILE_DISABLED", "DisableReconciler", boolVar(func(c *Config) *bool { return &c.DisableReconciler })},
	{"BATON_RECONCILE_SKIP_LEGACY_HEARTBEATS", "Reconciler.SkipLegacyHeartbeats", boolVar(func(c *Config) *bool { return &c.Reconciler.SkipLegacyHeartbeats })},
	{"BATON_RECONCILER_ELECTION_PREFIX", "ReconcilerElectionPrefix", func(c *Config, v string) error { c.ReconcilerElectionPrefix = v; return nil }},
	{"BATON_BALANCE_DISABLED", "Balance.Disabled", boolVar(func(c *Config) *bool { return &c.Balance.Disabled })},
	{"BATON_BALANCE_SHED_ABOVE", "Balance.ShedAbove", floatVar("a multiple of the fair share", func(c *Config) *float64 { return &c.Balance.ShedAbove })},
	{"BATON_REGISTRY_PREFIX", "Registry.Prefix", func(c *Config, v string) error { c.Registry.Prefix = v; return nil }},
	{"BATON_REGISTRY_HEARTBEAT_INTERVAL", "Registry.HeartbeatInterval", durVar(func(c *Config) *time.Duration { return &c.Registry.HeartbeatInterval })},
	{"BATON_REGISTRY_EVICT_AFTER", "Registry.EvictAfter", durVar(func(c *Config) *time.Duration { return &c.Registry.EvictAfter })},
	{"BATON_REGISTRY_RETENTION", "Registry.Retention", durVar(func(c *Config) *time.Duration { return &c.Registry.Retention })},
	{"BATON_REGISTRY_DISABLED", "DisableRegistry", boolVar(func(c *Config) *bool { return &c.DisableRegistry })},
}

type envVar struct {
	name  string
	field string
	set   func(c *Config, v string) error
}

// EnvVars lists the environment variables LoadEnv reads, each with the Config field it sets.
func EnvVars() [][2]string {
	out := make([][2]string, len(envVars))
	for i, v := range envVars {
		out[i] = [2]string{v.name, v.field}
	}
	return out
}

// LoadEnv applies the BATON_* environment variables to base and returns the result. It does not
// validate the whole configuration (Validate does); a value that cannot be parsed returns an error
// wrapping ErrInvalidConfig that names the variable, the field and the rule. Unknown BATON_*
// variables are refused too, so a typo does not silently leave a default in force, except in the
// namespaces of ClientEnvPrefixes (endpoints and credentials), the names listed in ignore (an
// application's own BATON_* settings) and the names of a Kubernetes service link's shape
// (IsServiceLinkEnv), which a Service named baton-* injects; ServiceLinkEnv lists those for the
// caller to log.
func LoadEnv(base Config, ignore ...string) (Config, error) {
	return loadEnv(base, os.LookupEnv, os.Environ(), ignore)
}

// LoadEnvFrom is LoadEnv reading environ (KEY=VALUE entries; the last of a key wins) instead of
// this process's environment: for tools that check the environment a deployment will give a worker.
func LoadEnvFrom(base Config, environ []string, ignore ...string) (Config, error) {
	vars := make(map[string]string, len(environ))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	return loadEnv(base, lookup, environ, ignore)
}

func loadEnv(c Config, lookup func(string) (string, bool), environ []string, ignore []string) (Config, error) {
	known := map[string]bool{}
	for _, v := range envVars {
		known[v.name] = true
		raw, ok := lookup(v.name)
		if !ok {
			continue
		}
		if err := v.set(&c, strings.TrimSpace(raw)); err != nil {
			return c, configerr.New(ErrInvalidConfig, v.name, "(%s) %v", v.field, err)
		}
	}
	for _, name := range ignore {
		known[name] = true
	}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !known[name] && !clientEnv(name) && !IsServiceLinkEnv(name) {
			// Quoted: a name is any bytes but '=' and NUL, and an error must not forge log lines.
			return c, configerr.New(ErrInvalidConfig, names.Quote(name), "is not a Baton setting (see baton.EnvVars)")
		}
	}
	return c, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func parseLabels(v string) (map[string]string, error) {
	labels := map[string]string{}
	for _, kv := range splitList(v) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || strings.TrimSpace(k) == "" {
			return nil, fmt.Errorf("must be key=value pairs separated by commas, got %s", names.Quote(kv))
		}
		labels[strings.TrimSpace(k)] = strings.TrimSpace(val)
	}
	return labels, nil
}

func durVar(field func(*Config) *time.Duration) func(*Config, string) error {
	return func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil && durationSyntax.MatchString(v) {
			return fmt.Errorf("is out of range: a duration is at most %v (about 292 years), got %s", time.Duration(math.MaxInt64).Truncate(time.Hour), names.Quote(v))
		}
		if err != nil {
			return fmt.Errorf("must be a duration such as 10s or 1m30s, got %s", names.Quote(v))
		}
		if d <= 0 {
			return fmt.Errorf("must be positive, got %v", d)
		}
		*field(c) = d
		return nil
	}
}

// durationSyntax matches what time.ParseDuration reads, whatever the size: a value it matches and
// ParseDuration refuses overflows.
var durationSyntax = regexp.MustCompile(`^[-+]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+$`)

func intVar(field func(*Config) *int) func(*Config, string) error {
	return func(c *Config, v string) error {
		i, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("must be an integer, got %s", names.Quote(v))
		}
		*field(c) = i
		return nil
	}
}

func floatVar(meaning string, field func(*Config) *float64) func(*Config, string) error {
	return func(c *Config, v string) error {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return fmt.Errorf("must be a number (%s), got %s", meaning, names.Quote(v))
		}
		*field(c) = f
		return nil
	}
}

func boolVar(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("must be true or false, got %s", names.Quote(v))
		}
		*field(c) = b
		return nil
	}
}

func clientEnv(name string) bool {
	for _, prefix := range append(ClientEnvPrefixes(), devstackEnvPrefix) {
		if strings.HasPrefix(name, prefix) {
			return true
		}
	}
	return false
}

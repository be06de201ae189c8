package baton

import (
	"cmp"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/names"
	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
var ErrInvalidConfig = errors.New("baton: invalid config")

// Config is everything a Node needs to know. The zero value of every field means its documented
// default; Project and Queues are required. The sub-configurations are the packages' own: their
// Logger and MeterProvider default to the Node's.
type Config struct {
	// Project the queues belong to. Required; a valid name (no '/', white space or control characters,
	// at most 200 bytes).
	Project string
	// Queues this process campaigns for. Required: 1 to 10,000 distinct valid names.
	Queues []string
	// ServerID is what this process is known by in elections, heartbeats, the registry and
	// termination reasons. Default <hostname>-<pid>-<4 random hex digits>, so a restarted process
	// never shares an ID with its previous life.
	ServerID string
	// Version of the worker build, shown in the registry and published to the other workers. Optional:
	// empty is unversioned, never older or newer than another worker. With versions, a rolling deploy
	// also moves each queue forward only, never to an older version than the one leading it; successor
	// hand-overs, drain and the calm balancer hold for every worker (see package balance).
	Version string
	// Capabilities the worker registers with (for example the workflow types it runs). Default: the
	// dispatcher workflow type.
	Capabilities []string
	// Labels the worker registers with. Optional.
	Labels map[string]string
	// MaxConcurrency the worker registers with. Default 100.
	MaxConcurrency int
	// Load, when set, is called at each registry heartbeat for each queue: the worker's load it
	// returns is shown in the registry (Worker.Active, TotalCompleted, TotalFailed) and in
	// Status().Worker.Load. It must return quickly. Default: none (the registry shows 0).
	Load func(queue string) WorkerLoad

	// Election tunes the queue elections (Prefix default "/baton/election", TTL default 10s, ...).
	Election election.Config
	// Balance spreads queue leadership over the workers (see package balance): a worker at its fair
	// share stops standing for more queues, and one above 1.25 × its share hands queues over.
	// Project, ServerID and Queues are set by the Node: leave them empty.
	Balance balance.Config
	// Takeover tunes the dispatcher takeover (workflow type, task queue, start mode, step-down policy).
	Takeover takeover.Config
	// Ownership tunes each queue's lifecycle across a term (package ownership): how many runs that
	// closed behind the owner's back a term replaces (MaxReplacements, default 5), and how long a
	// term whose takeover cannot succeed is kept (PermanentHold, default 30s, growing with the
	// queue's failed terms up to PermanentHoldMax, default 5m). PermanentHold must be at least
	// Takeover.RetryMax.
	Ownership ownership.Settings
	// Heartbeat tunes the owner's dispatcher heartbeats (interval default 10s; key TTL default the
	// larger of 1h and twice the reconciler's cleanup horizon).
	Heartbeat heartbeat.Config
	// Reconciler tunes the project's reconciler (interval default 1m, stale after 30s). Project,
	// ServerID and Prefix are set by the Node (Prefix from Heartbeat.Prefix): leave them empty.
	Reconciler reconciler.Config
	// Progress tunes the owner's checks that each run it leads makes progress (package progress):
	// interval default Heartbeat.Interval, so a stall shows in readiness, status and
	// baton.dispatch.stalled within two heartbeat intervals.
	Progress progress.Config
	// ReconcilerElectionPrefix is the etcd prefix of the reconciler election. Default
	// "/baton/reconciler"; it must differ from Election.Prefix.
	ReconcilerElectionPrefix string
	// DisableReconciler keeps this process out of the reconciler election (another deployment runs it).
	DisableReconciler bool
	// Registry tunes the worker registry (worker heartbeat default 10s, eviction after 3 × that).
	// Project is set by the Node: leave it empty.
	Registry registry.Config
	// DisableRegistry keeps this process out of the worker registry, and its queue leaders from
	// evicting dead workers.
	DisableRegistry bool

	// WaitForSession makes Start wait until this process holds an etcd session, so that an app
	// reports started only once Baton can campaign (Fx bounds the wait by its start timeout).
	// Default false: Start returns at once and the session follows.
	WaitForSession bool

	// Logger receives every component's logs. Default: no-op.
	Logger *zap.Logger
	// Events receives every component's typed events (package event: terms, takeovers, step-downs,
	// heartbeat trouble, stale runs ended, workers evicted, queues handed over), unless a component's
	// own Config names another Sink. It is called synchronously: it must return quickly. Default: none.
	Events event.Sink
	// MeterProvider receives every component's metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// Clock is the time, the timers and the jitter of the Node and of every component that names none
	// of its own (Election.Clock, Balance.Clock, ...): a Node on a clock.Fake runs on the fake's time
	// alone. Leases, Redis entry ages and Temporal's timeouts stay on the servers' clocks. Default: the
	// real clock.
	Clock clock.Clock
}

// WorkerLoad is what the application reports of its own work on one queue (Config.Load); the
// registry owns it (registry.Load).
type WorkerLoad = registry.Load

// MaxQueues bounds the queues of one Node.
const MaxQueues = 10_000

// withDefaults fills in every default and hands the Node's logger, meter provider, project and
// server ID down to the components.
func (c Config) withDefaults() Config {
	if c.ServerID == "" {
		c.ServerID = DefaultServerID()
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = 100
	}
	if c.ReconcilerElectionPrefix == "" {
		c.ReconcilerElectionPrefix = reconciler.DefaultElectionPrefix
	}
	if c.Takeover.WorkflowType == "" {
		c.Takeover.WorkflowType = takeover.DefaultWorkflowType
	}
	if len(c.Capabilities) == 0 {
		c.Capabilities = []string{c.Takeover.WorkflowType}
	}
	c.handDown()
	c.Reconciler.Project, c.Reconciler.ServerID = c.Project, c.ServerID
	if c.Heartbeat.Prefix == "" {
		c.Heartbeat.Prefix = heartbeat.DefaultPrefix
	}
	c.Reconciler.Prefix = c.Heartbeat.Prefix
	if c.Reconciler.DataConverter == nil {
		// Both read the owner memo of the same runs.
		c.Reconciler.DataConverter = c.Takeover.DataConverter
	}
	c.Reconciler = c.Reconciler.WithDefaults()
	if c.Heartbeat.KeyTTL == 0 {
		// A stale entry must outlive the reconciler's cleanup of its run.
		c.Heartbeat.KeyTTL = max(heartbeat.DefaultConfig().KeyTTL, 2*(c.Reconciler.StaleAfter+2*c.Reconciler.Interval))
	}
	c.Heartbeat = c.Heartbeat.WithDefaults()
	if c.Takeover.WatchInterval == 0 {
		// A closed run is noticed within one heartbeat interval, like a dead owner's missing heartbeat.
		c.Takeover.WatchInterval = c.Heartbeat.Interval
	}
	c.Takeover = c.Takeover.WithDefaults()
	c.Ownership = c.Ownership.WithDefaults()
	if c.Election.HandOverTimeout == 0 {
		// Every planned move (a stop, a drain, a transfer, a rollout, a shed) quiesces the run inside
		// the election's OnResign: the hand-over gets the quiesce's whole bound and the terminate's,
		// and never less than the election's own default for it (its ResignTimeout).
		resign := cmp.Or(c.Election.ResignTimeout, election.DefaultConfig().ResignTimeout)
		c.Election.HandOverTimeout = max(resign, c.Takeover.HandOverBudget())
	}
	if c.Progress.Interval == 0 {
		// A stall shows within two heartbeat intervals.
		c.Progress.Interval = c.Heartbeat.Interval
	}
	if c.Progress.WorkflowTaskTimeout == 0 {
		// A task is stuck by the measure of the task timeout the runs start with.
		c.Progress.WorkflowTaskTimeout = c.Takeover.WorkflowTaskTimeout
	}
	c.Progress = c.Progress.WithDefaults()
	c.Registry.Project = c.Project
	c.Registry = c.Registry.WithDefaults()
	return c
}

// handDown gives the Node's logger, meter provider, event sink and clock to every component that
// names none of its own.
func (c *Config) handDown() {
	for _, l := range []**zap.Logger{&c.Election.Logger, &c.Balance.Logger, &c.Takeover.Logger, &c.Heartbeat.Logger,
		&c.Reconciler.Logger, &c.Registry.Logger} {
		if *l == nil {
			*l = c.Logger
		}
	}
	for _, m := range []*metric.MeterProvider{&c.Balance.MeterProvider, &c.Takeover.MeterProvider, &c.Heartbeat.MeterProvider,
		&c.Reconciler.MeterProvider, &c.Registry.MeterProvider} {
		if *m == nil {
			*m = c.MeterProvider
		}
	}
	for _, sink := range []*event.Sink{&c.Election.Events, &c.Balance.Events, &c.Takeover.Events, &c.Heartbeat.Events,
		&c.Reconciler.Events, &c.Registry.Events} {
		if *sink == nil {
			*sink = c.Events
		}
	}
	for _, clk := range []*clock.Clock{&c.Election.Clock, &c.Balance.Clock, &c.Takeover.Clock, &c.Heartbeat.Clock,
		&c.Reconciler.Clock, &c.Registry.Clock} {
		if *clk == nil {
			*clk = c.Clock
		}
	}
}

// DefaultServerID returns <hostname>-<pid>-<4 random hex digits>, with characters a name may not
// contain replaced by '_'.
func DefaultServerID() string {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", strings.ReplaceAll(hostname(), "/", "_"), os.Getpid(), hex.EncodeToString(b[:]))
}

// hostname returns the host's name with white space and control characters replaced by '_', or
// "unknown"; it goes into server IDs and registry records.
func hostname() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		return "unknown"
	}
	return strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f {
			return '_'
		}
		return r
	}, host)
}

// Validate checks the configuration after defaults are applied, including the rules that span
// components, and returns an error wrapping ErrInvalidConfig that names the field and the rule.
func (c Config) Validate() error {
	_, err := c.Check()
	return err
}

// CheckedConfig is a Config that Check accepted, with every default applied. Its copy cannot be
// changed, so NewChecked need not check it again.
type CheckedConfig struct {
	cfg Config
	ok  bool
}

// Config returns the configuration, defaults applied.
func (c CheckedConfig) Config() Config { return c.cfg }

// StopBudget is the longest Node.Stop may take to hand every term over gracefully
// (election.Config.StopBudget: the quiesce and step-down of every run at once, the resigns, the
// session's revoke). A process gives its Node's Stop at least this, and its orchestrator's grace
// period (Kubernetes' terminationGracePeriodSeconds) at least this plus the process's own stop.
func (c CheckedConfig) StopBudget() time.Duration { return c.cfg.Election.StopBudget() }

// Check validates the configuration as Validate does and returns it, defaults applied, for
// NewChecked.
func (c Config) Check() (CheckedConfig, error) {
	d := c.withDefaults() // once: a default ServerID is random
	if err := d.check(c); err != nil {
		return CheckedConfig{}, err
	}
	return CheckedConfig{cfg: d, ok: true}, nil
}

// check validates c, which has its defaults applied; raw is the Config the application gave.
func (c Config) check(raw Config) error {
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	for _, f := range nodeOwned {
		if f.conflicts(raw, c) {
			return bad(f.path, "is set by the Node from %s; leave it empty", f.from)
		}
	}
	if err := names.Check(c.Project); err != nil {
		return bad("Project", "%s %v", names.Quote(c.Project), err)
	}
	if err := names.Check(c.ServerID); err != nil {
		return bad("ServerID", "%s %v", names.Quote(c.ServerID), err)
	}
	switch {
	case len(c.Queues) == 0:
		return bad("Queues", "must name at least one queue")
	case len(c.Queues) > MaxQueues:
		return bad("Queues", "must name at most %d queues, got %d", MaxQueues, len(c.Queues))
	}
	seen := make(map[string]bool, len(c.Queues))
	for i, q := range c.Queues {
		if err := names.Check(q); err != nil {
			return bad(fmt.Sprintf("Queues[%d]", i), "%s %v", names.Quote(q), err)
		}
		if seen[q] {
			return bad(fmt.Sprintf("Queues[%d]", i), "%s is listed twice", names.Quote(q))
		}
		seen[q] = true
	}
	if c.MaxConcurrency < 1 {
		return bad("MaxConcurrency", "must be at least 1, got %d", c.MaxConcurrency)
	}
	if err := c.checkComponents(); err != nil {
		return err
	}
	electionPrefix := election.DefaultConfig().Prefix
	if c.Election.Prefix != "" {
		electionPrefix = c.Election.Prefix
	}
	switch {
	case c.ReconcilerElectionPrefix == electionPrefix:
		return bad("ReconcilerElectionPrefix", "must differ from Election.Prefix (%s)", names.Quote(electionPrefix))
	case strings.HasSuffix(c.ReconcilerElectionPrefix, "/"):
		return bad("ReconcilerElectionPrefix", "must not end with '/', got %s", names.Quote(c.ReconcilerElectionPrefix))
	case c.Ownership.PermanentHold < c.Takeover.RetryMax:
		return bad("Ownership.PermanentHold", "must be at least Takeover.RetryMax (%v) so that a held term retries its takeover, got %v",
			c.Takeover.RetryMax, c.Ownership.PermanentHold)
	case c.Election.HandOverTimeout < c.Takeover.HandOverBudget():
		return bad("Election.HandOverTimeout", "must be at least Takeover.QuiesceTimeout + %v (%v): a planned move quiesces the run and ends it within it, got %v",
			takeover.StepDownReserve, c.Takeover.HandOverBudget(), c.Election.HandOverTimeout)
	case c.Reconciler.StaleAfter < 2*c.Heartbeat.Interval:
		return bad("Reconciler.StaleAfter", "must be at least 2 × Heartbeat.Interval (%v) so that one late heartbeat never makes a live owner stale, got %v",
			2*c.Heartbeat.Interval, c.Reconciler.StaleAfter)
	case !c.DisableReconciler && c.Heartbeat.KeyTTL <= c.Reconciler.StaleAfter+2*c.Reconciler.Interval:
		return bad("Heartbeat.KeyTTL", "must exceed Reconciler.StaleAfter + 2 × Reconciler.Interval (%v), or a stale entry could expire before the reconciler ends its run, got %v",
			c.Reconciler.StaleAfter+2*c.Reconciler.Interval, c.Heartbeat.KeyTTL)
	}
	return nil
}

// checkComponents validates each enabled component's configuration, reported under its field.
func (c Config) checkComponents() error {
	sub := func(field string, err error) error {
		return configerr.Under(ErrInvalidConfig, field, err, nodeOwnedFrom)
	}
	if err := sub("Election", c.Election.Validate()); err != nil {
		return err
	}
	bal := c.Balance
	bal.Project, bal.ServerID, bal.Queues, bal.Version = c.Project, c.ServerID, c.Queues, c.Version
	if err := sub("Balance", bal.Validate()); err != nil {
		return err
	}
	if err := sub("Takeover", c.Takeover.Validate()); err != nil {
		return err
	}
	if err := sub("Ownership", c.Ownership.Validate()); err != nil {
		return err
	}
	if err := sub("Heartbeat", c.Heartbeat.Validate()); err != nil {
		return err
	}
	if err := sub("Progress", c.Progress.Validate()); err != nil {
		return err
	}
	if !c.DisableReconciler {
		if err := sub("Reconciler", c.Reconciler.Validate()); err != nil {
			return err
		}
	}
	if !c.DisableRegistry {
		if err := sub("Registry", c.Registry.Validate()); err != nil {
			return err
		}
		reg := registry.Registration{ServerID: c.ServerID, Queue: c.Queues[0], PID: 1, Version: c.Version,
			Capabilities: c.Capabilities, Labels: c.Labels, MaxConcurrency: c.MaxConcurrency}
		// The registration's fields are the Config's own: Version, Capabilities, Labels, ...
		if err := sub("", reg.Validate()); err != nil {
			return err
		}
	}
	return nil
}

// nodeOwned lists the sub-configuration fields the Node sets itself: a value of the application's
// own there would be overwritten, so Validate refuses one that differs from the Node's (the Node's
// own value, as Node.Config reports it, is accepted back).
var nodeOwned = []struct {
	path, from string
	conflicts  func(raw, c Config) bool // c has the defaults applied
}{
	{"Balance.Project", "Project", func(r, c Config) bool { return r.Balance.Project != "" && r.Balance.Project != c.Project }},
	{"Balance.ServerID", "ServerID", func(r, c Config) bool { return r.Balance.ServerID != "" && r.Balance.ServerID != c.ServerID }},
	{"Balance.Queues", "Queues", func(r, c Config) bool { return r.Balance.Queues != nil && !slices.Equal(r.Balance.Queues, c.Queues) }},
	{"Balance.Version", "Version", func(r, c Config) bool { return r.Balance.Version != "" && r.Balance.Version != c.Version }},
	{"Reconciler.Project", "Project", func(r, c Config) bool { return r.Reconciler.Project != "" && r.Reconciler.Project != c.Project }},
	{"Reconciler.ServerID", "ServerID", func(r, c Config) bool {
		return r.Reconciler.ServerID != "" && r.Reconciler.ServerID != c.ServerID
	}},
	{"Reconciler.Prefix", "Heartbeat.Prefix", func(r, c Config) bool {
		return r.Reconciler.Prefix != "" && r.Reconciler.Prefix != c.Heartbeat.Prefix
	}},
	{"Registry.Project", "Project", func(r, c Config) bool { return r.Registry.Project != "" && r.Registry.Project != c.Project }},
}

// nodeOwnedFrom reports a field the Node sets under the Config field it comes from ("Project", not
// "Registry.Project").
func nodeOwnedFrom(path string) string {
	for _, f := range nodeOwned {
		if f.path == path {
			return f.from
		}
	}
	return path
}

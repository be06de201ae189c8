package reconciler

import (
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.temporal.io/sdk/converter"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/heartbeat"
)

// DefaultOrphanGrace is Config.OrphanGrace's default.
const DefaultOrphanGrace = 3 * time.Second

// DefaultElectionPrefix is the etcd prefix of the reconciler elections: the Elector handed to Run
// should use it (or any prefix other than the queue elections').
const DefaultElectionPrefix = "/baton/reconciler"

// ElectionQueue is the name the reconciler campaigns under, per project, on its own Elector.
const ElectionQueue = "reconciler"

// Config tunes a Reconciler. The zero value of every field means its documented default.
type Config struct {
	// Project whose dispatchers this reconciler cleans up. Required.
	Project string
	// ServerID is what this process campaigns with. Required.
	ServerID string
	// Prefix of the heartbeat keys; the same as the heartbeat writers'. Default "dispatcher:heartbeat:".
	// A cycle scans the project's keys (heartbeat.Pattern) only.
	Prefix string
	// SkipLegacyHeartbeats stops the cycles from scanning, and the orphan watch from reading, the
	// entries of the layout before per-project keys (heartbeat.LegacyKey), which workers of the
	// previous release write. Default false: this release cleans them up too, which takes the ACL
	// key pattern heartbeat.LegacyPattern (baton.Config.RedisACLRules adds it unless this is set).
	// Set it once no worker of the previous release runs; the next release drops that layout.
	SkipLegacyHeartbeats bool
	// Interval between cycles, jittered by up to a tenth either way. Default 1m; at least 100ms.
	Interval time.Duration
	// StaleAfter is the age, by Redis server time, past which an entry is stale. Default 30s; at least
	// 100ms, and it should span several heartbeat intervals. A crashed owner's run and entry are cleaned
	// up at most about StaleAfter + Interval after its last heartbeat (30s + 1m with the defaults).
	StaleAfter time.Duration
	// ScanCount is the COUNT hint of each SCAN, and so the size of each pipelined read. Default 1000;
	// 10 to 100,000.
	ScanCount int
	// TerminateRate limits workflow terminations per second; TerminateBurst is the bucket size.
	// Defaults 20/s and 5.
	TerminateRate  float64
	TerminateBurst int
	// OrphanGrace is how long a queue must stay without any candidate, after its last candidate key
	// went, before the reconciler leader ends the run and heartbeat entry its last owner left, at once
	// instead of at the next cycle: a crashed owner with no successor is cleaned up about TTL +
	// OrphanGrace after it died. Every worker that serves the queue stands within twice balance's
	// VacantWait (2s by default), and the first to win ends the old run itself. Default
	// DefaultOrphanGrace; negative: off (the cycle alone cleans up).
	OrphanGrace time.Duration
	// Workers is how many stale entries are cleaned at once. Default 4; 1 to 64.
	Workers int
	// SweepPageSize is how many open dispatcher runs one Temporal visibility page of the sweep lists.
	// Default 1000, the server's default page limit (frontend.visibilityMaxPageSize): a page costs the
	// server more per call than per run, and 10,000 open runs sweep in half the time of pages of 500.
	// 1 to 1000.
	SweepPageSize int
	// CallTimeout bounds each Redis, etcd and Temporal call. Default 5s.
	CallTimeout time.Duration
	// MaxFailedCycles is how many cycles in a row may fail (Redis or Temporal unreachable from this
	// process) before the reconciler leader resigns, so that a healthy candidate takes the job; it also
	// resigns when no cycle succeeded for StaleAfter + Interval. It stands again only once Redis and
	// Temporal answer it, after a backoff. Default 3; at least 1.
	MaxFailedCycles int
	// DataConverter reads the owner memo of the open runs the sweep lists; the Temporal client's data
	// converter when the application sets one. Default: the SDK's default data converter.
	DataConverter converter.DataConverter
	// Logger receives cycle summaries and every termination. Default: no-op.
	Logger *zap.Logger
	// Events receives the reconciler's events (event.StaleRunTerminated, StaleRunClosed). Optional.
	Events event.Sink
	// MeterProvider receives the baton.dispatcher.* and baton.reconcile.* metrics. Default: no-op.
	MeterProvider metric.MeterProvider
	// Clock paces cycles and measures their duration. Default: the real clock. Staleness is always
	// judged by Redis server time.
	Clock clock.Clock
}

// DefaultConfig is Config{} with every default applied: the one definition of the reconciler
// defaults, which the root package composes rather than restates.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = heartbeat.DefaultPrefix
	}
	if c.Interval == 0 {
		c.Interval = time.Minute
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = 30 * time.Second
	}
	if c.OrphanGrace == 0 {
		c.OrphanGrace = DefaultOrphanGrace
	}
	if c.ScanCount == 0 {
		c.ScanCount = 1000
	}
	if c.TerminateRate == 0 {
		c.TerminateRate = 20
	}
	if c.TerminateBurst == 0 {
		c.TerminateBurst = 5
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.SweepPageSize == 0 {
		c.SweepPageSize = 1000
	}
	if c.CallTimeout == 0 {
		c.CallTimeout = 5 * time.Second
	}
	if c.MaxFailedCycles == 0 {
		c.MaxFailedCycles = 3
	}
	if c.DataConverter == nil {
		c.DataConverter = converter.GetDefaultDataConverter()
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
	return c
}

// Validate checks the configuration after defaults are applied and returns an error wrapping
// ErrInvalidConfig that names the field and the rule it breaks.
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	if err := election.ValidateName("Project", c.Project); err != nil {
		return configerr.Under(ErrInvalidConfig, "", err, nil)
	}
	switch {
	case c.ServerID == "":
		return bad("ServerID", "must not be empty")
	case heartbeat.ValidatePrefix(c.Prefix) != nil:
		return bad("Prefix", "%v", heartbeat.ValidatePrefix(c.Prefix))
	case c.Interval < 100*time.Millisecond:
		return bad("Interval", "must be at least 100ms, got %v", c.Interval)
	case c.StaleAfter < 100*time.Millisecond:
		return bad("StaleAfter", "must be at least 100ms, got %v", c.StaleAfter)
	case c.ScanCount < 10 || c.ScanCount > 100_000:
		return bad("ScanCount", "must be between 10 and 100000, got %d", c.ScanCount)
	case c.TerminateRate <= 0:
		return bad("TerminateRate", "must be positive, got %v", c.TerminateRate)
	case c.TerminateBurst < 1:
		return bad("TerminateBurst", "must be at least 1, got %d", c.TerminateBurst)
	case c.Workers < 1 || c.Workers > 64:
		return bad("Workers", "must be between 1 and 64, got %d", c.Workers)
	case c.SweepPageSize < 1 || c.SweepPageSize > 1000:
		return bad("SweepPageSize", "must be between 1 and 1000, got %d", c.SweepPageSize)
	case c.CallTimeout <= 0:
		return bad("CallTimeout", "must be positive, got %v", c.CallTimeout)
	case c.MaxFailedCycles < 1:
		return bad("MaxFailedCycles", "must be at least 1, got %d", c.MaxFailedCycles)
	}
	return nil
}

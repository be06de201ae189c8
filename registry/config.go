package registry

import (
	"strings"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/names"
)

// DefaultPrefix is the default key prefix of the registry.
const DefaultPrefix = "baton:registry:"

// Config tunes a Registry. The zero value of every field means its documented default.
type Config struct {
	// Project whose workers this registry holds. Required; a valid name (see package names) without
	// '{' or '}', since it is the Redis Cluster hash tag of every key of the project.
	Project string
	// Prefix of every key. Default "baton:registry:". Not empty, at most 200 bytes, without white
	// space, control characters, '{' or '}'.
	Prefix string
	// HeartbeatInterval is how often workers are expected to heartbeat, and how often a Member does.
	// Default 10s; at least 10ms. It is the workers' contract and the base of EvictAfter.
	HeartbeatInterval time.Duration
	// EvictAfter is the heartbeat age, by Redis server time, past which the queue's leader evicts a
	// worker. Default 3 × HeartbeatInterval; it must exceed HeartbeatInterval, so that one late
	// heartbeat never evicts a live worker.
	EvictAfter time.Duration
	// Retention is how long an OFFLINE record (deregistered or evicted) stays visible to operators
	// before its key expires. Default 24h; at least 1ms.
	Retention time.Duration
	// EvictBatch is the number of heartbeats Evict examines per script call, and the number of
	// expired index entries it prunes per pass. Default 500; 1 to 10,000.
	EvictBatch int
	// Logger receives registrations, drains, deregistrations, every eviction and every malformed
	// record met. Default: no-op.
	Logger *zap.Logger
	// Events receives the registry's events (event.WorkerEvicted). Optional.
	Events event.Sink
	// MeterProvider receives baton.registry.evictions, baton.registry.heartbeats and
	// baton.registry.malformed. Default: no-op.
	MeterProvider metric.MeterProvider
	// Clock dates the registry's events and paces its Members' heartbeats. Default: the real clock.
	// Heartbeat ages are always Redis server time.
	Clock clock.Clock
}

// DefaultConfig is Config{} with every default applied: the one definition of the registry
// defaults, which the root package composes rather than restates.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = 10 * time.Second
	}
	if c.EvictAfter == 0 {
		c.EvictAfter = 3 * c.HeartbeatInterval
	}
	if c.Retention == 0 {
		c.Retention = 24 * time.Hour
	}
	if c.EvictBatch == 0 {
		c.EvictBatch = 500
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
	if err := names.Check(c.Project); err != nil {
		return bad("Project", "%s %v", names.Quote(c.Project), err)
	}
	switch {
	case strings.ContainsAny(c.Project, "{}"):
		return bad("Project", "%s must not contain '{' or '}' (it is the Redis Cluster hash tag of the project's keys)", names.Quote(c.Project))
	case validatePrefix(c.Prefix) != nil:
		return bad("Prefix", "%v", validatePrefix(c.Prefix))
	case c.HeartbeatInterval < 10*time.Millisecond:
		return bad("HeartbeatInterval", "must be at least 10ms, got %v", c.HeartbeatInterval)
	case c.EvictAfter <= c.HeartbeatInterval:
		return bad("EvictAfter", "must exceed HeartbeatInterval (%v), got %v", c.HeartbeatInterval, c.EvictAfter)
	case c.Retention < time.Millisecond:
		return bad("Retention", "must be at least 1ms, got %v", c.Retention)
	case c.EvictBatch < 1 || c.EvictBatch > 10_000:
		return bad("EvictBatch", "must be between 1 and 10000, got %d", c.EvictBatch)
	}
	return nil
}

func validatePrefix(p string) error {
	return names.CheckPrefix(p, "{}", "'{' or '}', the project is the hash tag")
}

package heartbeat

import (
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/names"
)

// Config tunes a Writer. The zero value of every field means its documented default.
type Config struct {
	// Prefix of every heartbeat key; the key is Prefix + workflow ID. Default "dispatcher:heartbeat:".
	// The reconciler must use the same prefix.
	Prefix string
	// Interval between writes. Default 10s; at least 100ms.
	Interval time.Duration
	// KeyTTL is a backstop expiry set on every write, so an entry nobody cleans up does not live
	// forever. Default 1h. It must exceed the reconciler's cleanup horizon (stale threshold plus a cycle):
	// an entry that expires before the reconciler sees it leaves its run for the next takeover to end.
	// At least 10 × Interval.
	KeyTTL time.Duration
	// Timeout bounds each write. Default Interval/2.
	Timeout time.Duration
	// Logger receives write failures and refusals. Default: no-op.
	Logger *zap.Logger
	// Events receives the heartbeat's events (event.HeartbeatRefused, HeartbeatFailed,
	// HeartbeatRecovered). Optional.
	Events event.Sink
	// MeterProvider receives baton.heartbeat.writes. Default: no-op.
	MeterProvider metric.MeterProvider
	// Clock paces the loop. Default: the real clock. Entry times always come from Redis.
	Clock clock.Clock
}

// DefaultConfig is Config{} with every default applied: the one definition of the heartbeat
// defaults, which the root package composes rather than restates.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Interval == 0 {
		c.Interval = 10 * time.Second
	}
	if c.KeyTTL == 0 {
		c.KeyTTL = time.Hour
	}
	if c.Timeout == 0 {
		c.Timeout = c.Interval / 2
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
	switch {
	case ValidatePrefix(c.Prefix) != nil:
		return bad("Prefix", "%v", ValidatePrefix(c.Prefix))
	case c.Interval < 100*time.Millisecond:
		return bad("Interval", "must be at least 100ms, got %v", c.Interval)
	case c.KeyTTL < 10*c.Interval:
		return bad("KeyTTL", "must be at least 10 × Interval (%v), got %v", 10*c.Interval, c.KeyTTL)
	case c.Timeout <= 0:
		return bad("Timeout", "must be positive, got %v", c.Timeout)
	case c.Timeout > c.Interval:
		return bad("Timeout", "must be at most Interval (%v), got %v", c.Interval, c.Timeout)
	}
	return nil
}

// ValidatePrefix checks a heartbeat key prefix: not empty, no glob characters (it is used in SCAN
// MATCH), no white space or control characters, at most 200 bytes.
func ValidatePrefix(p string) error { return names.CheckPrefix(p, "*?[]\\", "glob characters") }

package progress

import (
	"errors"
	"time"

	"github.com/baton-run/baton/configerr"
)

// ErrInvalidConfig matches every error of Config.Validate.
var ErrInvalidConfig = errors.New("progress: invalid config")

// Config tunes the progress checks. The zero value of every field means its documented default.
type Config struct {
	// Disabled turns the owner's checks off (Check itself ignores it).
	Disabled bool
	// Interval is how often the owner checks each run it leads. Default: the root configuration's
	// heartbeat interval (10s), so that a stall shows within two intervals; 10ms to 10m.
	Interval time.Duration
	// PollerWindow: a worker that polled the run's task queue within it counts as polling. Default
	// 2m (a worker's long poll lasts up to about 70s, and the server stamps the poll's start); 1s to
	// 1h.
	PollerWindow time.Duration
	// TaskStuckAfter: a workflow task pending longer is stuck. Default 20s (twice Temporal's default
	// workflow task timeout: one timed-out attempt is retried, not reported); 1s to 1h.
	TaskStuckAfter time.Duration
	// FailingAttempts: a dispatch activity or a workflow task at this attempt fails in a loop (every
	// earlier attempt failed or timed out). Default 3; 2 to 1,000.
	FailingAttempts int32
	// PendingMax: the oldest accepted request waiting longer is a stall. Default 1m; 1s to 24h.
	PendingMax time.Duration
	// CallTimeout bounds each Temporal call of a check. Default 5s; 10ms to 1m.
	CallTimeout time.Duration
}

// DefaultConfig is Config{} with every default applied: the one definition of these defaults.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Interval, 10*time.Second)
	def(&c.PollerWindow, 2*time.Minute)
	def(&c.TaskStuckAfter, 20*time.Second)
	def(&c.PendingMax, time.Minute)
	def(&c.CallTimeout, 5*time.Second)
	if c.FailingAttempts == 0 {
		c.FailingAttempts = 3
	}
	return c
}

// Validate returns an error naming the first field out of its range (after defaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	for _, f := range []struct {
		name      string
		v, lo, hi time.Duration
	}{
		{"Interval", c.Interval, 10 * time.Millisecond, 10 * time.Minute},
		{"PollerWindow", c.PollerWindow, time.Second, time.Hour},
		{"TaskStuckAfter", c.TaskStuckAfter, time.Second, time.Hour},
		{"PendingMax", c.PendingMax, time.Second, 24 * time.Hour},
		{"CallTimeout", c.CallTimeout, 10 * time.Millisecond, time.Minute},
	} {
		if f.v < f.lo || f.v > f.hi {
			return configerr.New(ErrInvalidConfig, f.name, "must be %s to %s, got %s", f.lo, f.hi, f.v)
		}
	}
	if c.FailingAttempts < 2 || c.FailingAttempts > 1000 {
		return configerr.New(ErrInvalidConfig, "FailingAttempts", "must be 2 to 1000, got %d", c.FailingAttempts)
	}
	return nil
}

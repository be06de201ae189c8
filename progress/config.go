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
	// WorkflowTaskTimeout is the workflow task timeout of the runs checked: Baton's root sets the one
	// its takeovers start runs with (takeover.Config.WorkflowTaskTimeout). Default
	// TemporalWorkflowTaskTimeout; 1s to 2m.
	WorkflowTaskTimeout time.Duration
	// TaskStuckAfter: a workflow task pending longer is stuck. Default twice WorkflowTaskTimeout (one
	// timed-out attempt is retried, not reported), at least DefaultTaskStuckAfter; at least
	// WorkflowTaskTimeout (a task may run that long and be healthy), at most 1h.
	TaskStuckAfter time.Duration
	// FailingAttempts: a dispatch activity or a workflow task at this attempt fails in a loop (every
	// earlier attempt failed or timed out). Default 3; 2 to 1,000.
	FailingAttempts int32
	// PendingMax: the oldest accepted request waiting longer is a stall. Default 1m; 1s to 24h.
	PendingMax time.Duration
	// CallTimeout bounds each Temporal call of a check. Default 5s; 10ms to 1m.
	CallTimeout time.Duration
}

// TemporalWorkflowTaskTimeout is Temporal's own default workflow task timeout (a namespace's, when
// a start names none): Config.WorkflowTaskTimeout's default.
const TemporalWorkflowTaskTimeout = 10 * time.Second

// DefaultTaskStuckAfter is the least default of Config.TaskStuckAfter: with short task timeouts a
// task that waits a few seconds on a busy worker is not yet stuck.
const DefaultTaskStuckAfter = 20 * time.Second

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
	def(&c.WorkflowTaskTimeout, TemporalWorkflowTaskTimeout)
	def(&c.TaskStuckAfter, max(DefaultTaskStuckAfter, 2*c.WorkflowTaskTimeout))
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
		{"WorkflowTaskTimeout", c.WorkflowTaskTimeout, time.Second, 2 * time.Minute},
		{"TaskStuckAfter", c.TaskStuckAfter, time.Second, time.Hour},
		{"PendingMax", c.PendingMax, time.Second, 24 * time.Hour},
		{"CallTimeout", c.CallTimeout, 10 * time.Millisecond, time.Minute},
	} {
		if f.v < f.lo || f.v > f.hi {
			return configerr.New(ErrInvalidConfig, f.name, "must be %s to %s, got %s", f.lo, f.hi, f.v)
		}
	}
	if c.TaskStuckAfter < c.WorkflowTaskTimeout {
		return configerr.New(ErrInvalidConfig, "TaskStuckAfter", "must be at least WorkflowTaskTimeout (%s): a task may run that long and be healthy, got %s",
			c.WorkflowTaskTimeout, c.TaskStuckAfter)
	}
	if c.FailingAttempts < 2 || c.FailingAttempts > 1000 {
		return configerr.New(ErrInvalidConfig, "FailingAttempts", "must be 2 to 1000, got %d", c.FailingAttempts)
	}
	return nil
}

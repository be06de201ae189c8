package election

import (
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/names"
)

// MinTTL is etcd's minimum lease TTL; a shorter lease would be extended by the server anyway, which
// would break the local deadline arithmetic.
const MinTTL = 2 * time.Second

// MaxTTL is the longest TTL Validate accepts without AllowLongTTL: a crashed leader is replaced about
// TTL after the crash, and the PRD's takeover SLA is 30 s.
const MaxTTL = 30 * time.Second

// Config tunes an Elector. The zero value of every field means its documented default.
type Config struct {
	// Prefix is the etcd key prefix of every election. Candidates for (project, queue) live under
	// <Prefix>/<project>/<queue>/. Default "/baton/election". It must not be empty or end with '/'.
	Prefix string

	// TTL is the lease TTL of the process's session. Default 10s. At least 2s (etcd's minimum), whole
	// seconds (etcd leases are granted in seconds). A crashed leader is replaced about TTL after the crash.
	TTL time.Duration
	// AllowLongTTL lets TTL exceed MaxTTL: the operator accepts that a crashed leader's queues wait
	// that long for a new leader. Default false.
	AllowLongTTL bool

	// SafetyMargin ends every term at (local lease deadline - SafetyMargin). The local deadline is the
	// time just before the last acknowledged keepalive was sent plus the TTL granted in its response, a
	// lower bound of the server's expiry. Default TTL/4; must be positive and less than TTL/2.
	SafetyMargin time.Duration

	// KeepAliveInterval is the time between keepalives. Default TTL/3. It must leave room for at least two
	// keepalives before a term would end: KeepAliveInterval <= (TTL - SafetyMargin)/2.
	KeepAliveInterval time.Duration

	// RetryMin and RetryMax bound the jittered exponential backoff of failed keepalives (RetryMin only),
	// of re-campaigns after a lost term, of failed campaigns, of Run's pause before it stands again
	// after a term whose OnElected failed, and of the retried revoke of a lost session's lease
	// (capped at 1s). Defaults 100ms and 5s; RetryMin must be positive, RetryMax at least RetryMin,
	// and RetryMin less than KeepAliveInterval.
	RetryMin, RetryMax time.Duration

	// ResignTimeout bounds each step of the handover that Run performs when its context ends, after
	// OnResign: the wait for OnElected to return after its term ended (a callback that ignores its
	// cancelled context holds the handover up no longer), and the delete of the key. It also bounds
	// each attempt to revoke a session's lease. Default 2s.
	ResignTimeout time.Duration
	// HandOverTimeout bounds the OnResign call of a graceful handover: the time a leader has, while
	// its term still holds and before any successor can win, to hand its work over (Baton's Node lets
	// the handlers in its dispatcher run finish, then ends the run, there). Default ResignTimeout;
	// Baton's Node sets it from the takeover's quiesce bound. Must be positive.
	HandOverTimeout time.Duration

	// MaxCampaignRequests bounds the campaign requests (the transaction that enters the line, the
	// reads that verify a win or find a predecessor) one Elector has in flight at once; the rest wait
	// their turn in the process. A process that campaigns for thousands of queues at start-up would
	// otherwise put them all into etcd at once, and etcd answers a lease keepalive only after the
	// requests in front of it: the session would be lost to the burst it caused. Below this bound the
	// Elector adapts to etcd's answer time: an answer slower than half the time a keepalive has to
	// come back in ((TTL - SafetyMargin - KeepAliveInterval)/2) halves the requests in flight, a fast
	// one adds one back (window.go). Default 64; at least 1. Resigns and deletes of candidate
	// keys are not counted: they must not wait behind campaigns.
	MaxCampaignRequests int

	// MaxHandOvers bounds the graceful hand-overs of one Elector's terms under way at once. A stop
	// (or a drain, transfer, rollout or shed) of a process that leads thousands of queues resigns
	// them all in one round, each in a slot of its own from OnResign to the delete of its key, so
	// that the resign follows its run's end at once; without a bound, the Temporal and etcd requests
	// of ten thousand hand-overs would all go out together and the last of them would wait behind
	// the rest in the servers' queues anyway. A stop of n terms takes about ceil(n / MaxHandOvers)
	// hand-over times, and at most that many StopBudgets. Default 64; at least 1.
	MaxHandOvers int

	// Logger receives structured events (session granted and lost, term started and ended). Default: no-op.
	Logger *zap.Logger
	// Events receives the elections' events (event.TermStarted, TermEnded, ResignFailed). Optional.
	Events event.Sink

	// Clock is the time source for lease deadlines and backoff. Default: the real clock.
	Clock clock.Clock
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "/baton/election"
	}
	if c.TTL == 0 {
		c.TTL = 10 * time.Second
	}
	if c.SafetyMargin == 0 {
		c.SafetyMargin = c.TTL / 4
	}
	if c.KeepAliveInterval == 0 {
		c.KeepAliveInterval = c.TTL / 3
	}
	if c.RetryMin == 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 5 * time.Second
	}
	if c.ResignTimeout == 0 {
		c.ResignTimeout = 2 * time.Second
	}
	if c.HandOverTimeout == 0 {
		c.HandOverTimeout = c.ResignTimeout
	}
	if c.MaxCampaignRequests == 0 {
		c.MaxCampaignRequests = 64
	}
	if c.MaxHandOvers == 0 {
		c.MaxHandOvers = 64
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c
}

// Validate checks the configuration after defaults are applied and returns an error wrapping
// ErrInvalidConfig that names the field and the rule it breaks.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	switch {
	case strings.HasSuffix(c.Prefix, "/"):
		return bad("Prefix", "must not end with '/', got %s", names.Quote(c.Prefix))
	case strings.ContainsFunc(c.Prefix, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return bad("Prefix", "must not contain control characters, got %s", names.Quote(c.Prefix))
	case c.TTL < MinTTL:
		return bad("TTL", "must be at least %v (etcd's minimum lease TTL), got %v", MinTTL, c.TTL)
	case c.TTL > MaxTTL && !c.AllowLongTTL:
		return bad("TTL", "must be at most %v, the takeover SLA (a crashed leader is replaced about TTL after the crash); set AllowLongTTL to exceed it, got %v", MaxTTL, c.TTL)
	case c.TTL%time.Second != 0:
		return bad("TTL", "must be a whole number of seconds (etcd grants leases in seconds), got %v", c.TTL)
	case c.SafetyMargin <= 0:
		return bad("SafetyMargin", "must be positive, got %v", c.SafetyMargin)
	case c.SafetyMargin >= c.TTL/2:
		return bad("SafetyMargin", "must be less than TTL/2 (%v), got %v", c.TTL/2, c.SafetyMargin)
	case c.KeepAliveInterval <= 0:
		return bad("KeepAliveInterval", "must be positive, got %v", c.KeepAliveInterval)
	case c.KeepAliveInterval > (c.TTL-c.SafetyMargin)/2:
		return bad("KeepAliveInterval", "must be at most (TTL - SafetyMargin)/2 = %v so that two keepalives fit before a term ends, got %v",
			(c.TTL-c.SafetyMargin)/2, c.KeepAliveInterval)
	case c.RetryMin <= 0:
		return bad("RetryMin", "must be positive, got %v", c.RetryMin)
	case c.RetryMin >= c.KeepAliveInterval:
		return bad("RetryMin", "must be less than KeepAliveInterval (%v), got %v", c.KeepAliveInterval, c.RetryMin)
	case c.RetryMax < c.RetryMin:
		return bad("RetryMax", "must be at least RetryMin (%v), got %v", c.RetryMin, c.RetryMax)
	case c.ResignTimeout <= 0:
		return bad("ResignTimeout", "must be positive, got %v", c.ResignTimeout)
	case c.HandOverTimeout <= 0:
		return bad("HandOverTimeout", "must be positive, got %v", c.HandOverTimeout)
	case c.MaxCampaignRequests < 1:
		return bad("MaxCampaignRequests", "must be at least 1, got %d", c.MaxCampaignRequests)
	case c.MaxHandOvers < 1:
		return bad("MaxHandOvers", "must be at least 1, got %d", c.MaxHandOvers)
	}
	return nil
}

// StopBudget is the longest a graceful stop of an Elector's campaigns may take, defaults applied,
// when it holds at most MaxHandOvers terms: every held term is handed over in one round (OnResign
// within HandOverTimeout, then the wait for OnElected and the delete of the key, ResignTimeout
// each), then the session's lease is revoked (ResignTimeout). A process's stop deadline leaves at
// least this to its Elector. With more terms whose hand-overs all use their whole bounds the round
// takes up to ceil(terms / MaxHandOvers) hand-over bounds; hand-overs that answer take milliseconds,
// and a term still held when the deadline comes ends with its session's lease.
func (c Config) StopBudget() time.Duration {
	c = c.withDefaults()
	return c.HandOverTimeout + 3*c.ResignTimeout
}

// ValidateName checks a project or queue name; field names the argument in the error.
func ValidateName(field, value string) error {
	if err := names.Check(value); err != nil {
		return configerr.New(ErrInvalidName, field, "%s %v", names.Quote(value), err)
	}
	return nil
}

package balance

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/names"
)

// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
var ErrInvalidConfig = errors.New("balance: invalid config")

// Config tunes a Runner. The zero value of every field means its documented default.
type Config struct {
	// Project and ServerID are what the worker campaigns with. Required.
	Project, ServerID string
	// Queues the worker campaigns for. Required, distinct.
	Queues []string
	// ShedAbove is the multiple of the fair share above which a worker hands terms over. Default 1.25;
	// at least 1.
	ShedAbove float64
	// ShedInterval is the pause between two handovers of one worker, so that rebalancing never storms.
	// Default 20ms, or MoveWindow / MaxMoves when the move cap allows more moves than that.
	ShedInterval time.Duration
	// Disabled campaigns for every queue all the time, as plain elections do.
	Disabled bool
	// Version of this worker's build, published in its member record. With versions, a rolling deploy
	// moves each queue forward only: never to an older version than the one leading it. Empty: an
	// unversioned worker, never older or newer than another, so it takes no part in forward-only. Every
	// worker, versioned or not, names its successor when it resigns, hands over when draining, and
	// keeps the calm balancer's rules (no rebalancing while workers of two versions are live).
	Version string
	// Grace is how long the other workers defer to a named successor, and at most how long a resigning
	// leader waits for its successor to stand first in line. Default 500ms.
	Grace time.Duration
	// Cooldown is the least time between two balancing moves of one queue: a term younger than this
	// is not shed. Default 5s.
	Cooldown time.Duration
	// MaxMoves caps the balancing moves (sheds) of this worker per MoveWindow. Default 10 per 1s, or
	// one in twenty of the worker's queues if that is more: a cap that does not grow with the queues
	// would take minutes to spread a large fleet's start-up (a worker of 10,000 queues that won half of
	// them at 10 moves per second), while one in twenty per second still moves a queue at most once in
	// a Cooldown and never storms.
	MaxMoves   int
	MoveWindow time.Duration
	// Settle is how long a starting worker looks at the fleet's member records before it stands for a
	// queue nobody stands for, so that workers starting together spread such queues by rank instead of
	// all racing for all of them (see vacant.go). Default 500ms (zero means the default: 1ns stands at
	// once).
	Settle time.Duration
	// VacantWait is how long the second-ranked worker for a queue nobody stands for waits before it
	// stands all the same (the first-ranked one may be gone, slow, or not serve the queue); every
	// other worker waits twice as long. It bounds how long a queue stays without a candidate.
	// Default 1s.
	VacantWait time.Duration
	// Reach checks, cheaply, that this worker's own Temporal client answers now (a Node wires the
	// client's health check). It runs every ReachEvery, and the answer is published in the member
	// record: only a worker whose last check passed takes a queue handed over as unfit (Unfit).
	// Nil: this worker never says it reaches Temporal, so it takes no unfit queue.
	Reach func(ctx context.Context) error
	// ReachEvery is the period of Reach, and its timeout. Default 5s; a Node sets its progress
	// interval, so that a worker's reach is never older than one progress check of a leader.
	ReachEvery time.Duration
	// Logger receives rebalancing decisions. Default: no-op.
	Logger *zap.Logger
	// Events receives balance's events (event.HandingOver). Optional.
	Events event.Sink
	// MeterProvider receives the owner-change counter and the leading gauge. Default: no-op.
	MeterProvider metric.MeterProvider
	// Clock is the time source of the balance's decisions and pacing (cooldowns, move windows, the
	// grace and unfit pauses, vacancy waits, membership ages), of the timers that wake an idle queue
	// and of its retries. Default: the real clock.
	Clock clock.Clock
}

// DefaultConfig is Config{} with every default applied: the one definition of the balance defaults,
// which the root package and tools read rather than restate.
func DefaultConfig() Config { return Config{}.WithDefaults() }

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.ShedAbove == 0 {
		c.ShedAbove = 1.25
	}
	if c.Grace == 0 {
		c.Grace = 500 * time.Millisecond
	}
	if c.Cooldown == 0 {
		c.Cooldown = 5 * time.Second
	}
	if c.MaxMoves == 0 {
		c.MaxMoves = max(10, len(c.Queues)/20)
	}
	if c.MoveWindow == 0 {
		c.MoveWindow = time.Second
	}
	if c.Settle == 0 {
		c.Settle = 500 * time.Millisecond
	}
	if c.VacantWait == 0 {
		c.VacantWait = time.Second
	}
	if c.ShedInterval == 0 {
		c.ShedInterval = min(20*time.Millisecond, c.MoveWindow/time.Duration(max(c.MaxMoves, 1)))
	}
	if c.ReachEvery == 0 {
		c.ReachEvery = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.MeterProvider == nil {
		c.MeterProvider = noop.NewMeterProvider()
	}
	return c
}

// Validate checks the configuration after defaults are applied.
func (c Config) Validate() error {
	c = c.WithDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	if err := election.ValidateName("Project", c.Project); err != nil {
		return configerr.Under(ErrInvalidConfig, "", err, nil)
	}
	seen := map[string]bool{}
	for i, q := range c.Queues {
		if err := election.ValidateName(fmt.Sprintf("Queues[%d]", i), q); err != nil {
			return configerr.Under(ErrInvalidConfig, "", err, nil)
		}
		if seen[q] {
			return bad(fmt.Sprintf("Queues[%d]", i), "%q is listed twice", q)
		}
		seen[q] = true
	}
	switch {
	case c.ServerID == "":
		return bad("ServerID", "must not be empty")
	case len(c.Queues) == 0:
		return bad("Queues", "must name at least one queue")
	case c.ShedAbove < 1:
		return bad("ShedAbove", "must be at least 1, got %v", c.ShedAbove)
	case c.Grace <= 0:
		return bad("Grace", "must be positive, got %v", c.Grace)
	case c.Cooldown < 0:
		return bad("Cooldown", "must not be negative, got %v", c.Cooldown)
	case c.MaxMoves < 1:
		return bad("MaxMoves", "must be at least 1, got %d", c.MaxMoves)
	case c.MoveWindow <= 0:
		return bad("MoveWindow", "must be positive, got %v", c.MoveWindow)
	case c.ShedInterval <= 0: // after MoveWindow and MaxMoves: its default is derived from them
		return bad("ShedInterval", "must be positive, got %v", c.ShedInterval)
	case c.Settle < 0:
		return bad("Settle", "must not be negative, got %v", c.Settle)
	case c.VacantWait < 0:
		return bad("VacantWait", "must not be negative, got %v", c.VacantWait)
	case c.ReachEvery < 0:
		return bad("ReachEvery", "must not be negative, got %v", c.ReachEvery)
	}
	if err := names.Check(c.Version); c.Version != "" && err != nil {
		return bad("Version", "%s %v", names.Quote(c.Version), err)
	}
	return nil
}

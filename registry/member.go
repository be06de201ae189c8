package registry

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/names"
)

// Load is what a worker reports of its own work on one queue (MemberConfig.Load): the registry
// shows it beside the worker, so that operators and schedulers see the load, not only the liveness,
// of each worker.
type Load struct {
	// Active is the number of tasks running now.
	Active int `json:"active"`
	// Completed and Failed are the tasks completed and failed since the process started: running
	// totals, so that the application keeps plain counters; the Member sends the registry the
	// increase since its last heartbeat the registry took.
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

// Drainer hears whether the registry asks this worker to drain (*balance.Runner: a draining worker
// hands its queues over and stops standing). It is called from the Member's loop, once per change,
// and must return quickly.
type Drainer interface {
	SetDraining(draining bool)
}

// registrar is what a Member asks of the registry (*Registry): small, so that the loop's logic is
// tested on a fake clock with a scripted registry, beside the real-Redis tests.
type registrar interface {
	Register(ctx context.Context, reg Registration) (Worker, error)
	Heartbeat(ctx context.Context, queue, serverID string, b Beat) (Status, error)
}

var _ registrar = (*Registry)(nil)

// MemberConfig is who a worker is in the registry and what it hears back.
type MemberConfig struct {
	// Worker is what the worker registers with on each of Queues (ServerID, Hostname, PID, Version,
	// Capabilities, Labels, MaxConcurrency; see Registration for the rules). Its Queue is set per
	// queue by the Member: leave it empty.
	Worker Registration
	// Queues the worker registers for. Required: at least one, each a valid name, none twice.
	Queues []string
	// Load, when set, is called at each heartbeat for each queue: the load it returns is shown in
	// the registry (Worker.Active, TotalCompleted, TotalFailed) and in MemberState.Load. It must
	// return quickly. Default: none (the registry shows 0).
	Load func(queue string) Load
	// Drainer hears each change of whether the registry asks this worker to drain. Optional.
	Drainer Drainer
}

// Validate returns an error wrapping ErrInvalidConfig that names the field and the rule it breaks,
// or nil. The Worker's rules are Registration's, reported under "Worker".
func (c MemberConfig) Validate() error {
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
	}
	if c.Worker.Queue != "" {
		return bad("Worker.Queue", "is set per queue by the Member from Queues; leave it empty, got %s", names.Quote(c.Worker.Queue))
	}
	if len(c.Queues) == 0 {
		return bad("Queues", "must name at least one queue")
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
	reg := c.Worker
	reg.Queue = c.Queues[0]
	return configerr.Under(ErrInvalidConfig, "Worker", reg.Validate(), nil)
}

// MemberState is what a Member knows of its own registration, for status pages. Every time in it
// is the Member's clock's.
type MemberState struct {
	// Status is each queue's status as the registry last answered a heartbeat: a drain shows here.
	Status map[string]Status
	// Load is what MemberConfig.Load last reported per queue, as the registry took it; nil without
	// MemberConfig.Load.
	Load map[string]Load
	// LastHeartbeat is when a registration or heartbeat last succeeded.
	LastHeartbeat time.Time
	// Err is the last registration or heartbeat failure; nil once one succeeds again.
	Err error
}

// Member keeps one worker registered on its queues: the worker half of the registry, as Evict is
// the leader's half. Run registers the worker on every queue, heartbeats it every HeartbeatInterval
// of the Registry's Config with the load MemberConfig.Load reports, registers it again after an
// eviction or a lost record (a Redis restart), and tells the Drainer when the registry asks the
// worker to drain and when it takes that back.
type Member struct {
	reg      registrar
	cfg      MemberConfig
	interval time.Duration
	clk      clock.Clock
	log      *zap.Logger

	// Only Run touches these.
	registered map[string]bool
	sent       map[string]Load // per queue, the totals of the last heartbeat the registry took
	draining   bool            // what the Drainer last heard

	mu    sync.Mutex
	state MemberState
}

// NewMember returns the Member of the worker cfg describes, over reg, on reg's clock and logger. It
// validates cfg and starts nothing.
func NewMember(reg *Registry, cfg MemberConfig) (*Member, error) {
	if reg == nil {
		return nil, fmt.Errorf("%w: Registry must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return newMember(reg, cfg, reg.cfg.HeartbeatInterval, reg.cfg.Clock, reg.log), nil
}

func newMember(reg registrar, cfg MemberConfig, interval time.Duration, clk clock.Clock, log *zap.Logger) *Member {
	m := &Member{reg: reg, cfg: cfg, interval: interval, clk: clk,
		log:        log.With(zap.String("server_id", cfg.Worker.ServerID)),
		registered: make(map[string]bool, len(cfg.Queues)), sent: map[string]Load{},
		state: MemberState{Status: make(map[string]Status, len(cfg.Queues))}}
	if cfg.Load != nil {
		m.state.Load = make(map[string]Load, len(cfg.Queues))
	}
	return m
}

// Run keeps the worker registered and heartbeating until ctx ends: a round over every queue, then
// HeartbeatInterval on the clock, and again. A failure is recorded (MemberState.Err), logged once
// until a call succeeds again, and retried at the next round. Run is called once, by the Member's
// owner, which waits for it to return.
func (m *Member) Run(ctx context.Context) {
	for {
		for _, q := range m.cfg.Queues {
			if ctx.Err() != nil {
				return
			}
			m.keep(ctx, q)
		}
		m.tellDrainer()
		if !clock.Sleep(ctx, m.clk, m.interval) {
			return
		}
	}
}

// keep registers the worker on queue, or heartbeats it there once it is registered. A heartbeat the
// registry refuses as not registered (evicted, deregistered, the record lost) makes the next round
// register again.
func (m *Member) keep(ctx context.Context, queue string) {
	id := m.cfg.Worker.ServerID
	if !m.registered[queue] {
		reg := m.cfg.Worker
		reg.Queue = queue
		_, err := m.reg.Register(ctx, reg)
		m.registered[queue] = err == nil
		m.record(queue, err, nil)
		return
	}
	beat, load := m.beat(queue)
	status, err := m.reg.Heartbeat(ctx, queue, id, beat)
	if errors.Is(err, ErrNotRegistered) {
		m.registered[queue] = false
	}
	if err != nil {
		m.record(queue, err, nil)
		return
	}
	if m.cfg.Load != nil {
		m.sent[queue] = load
	}
	m.record(queue, nil, func(s *MemberState) {
		s.Status[queue] = status
		if s.Load != nil {
			s.Load[queue] = load
		}
	})
}

// beat returns the heartbeat for queue and the load it reports: the increase of the totals since the
// last heartbeat the registry took (a refused one is sent again with the next). A total that went
// down (the application reset its counter) counts from zero.
func (m *Member) beat(queue string) (Beat, Load) {
	if m.cfg.Load == nil {
		return Beat{}, Load{}
	}
	now := m.cfg.Load(queue)
	prev := m.sent[queue]
	delta := func(now, prev int64) int {
		if now < prev {
			prev = 0
		}
		// Out of range (a negative figure, or billions in one interval) the registry refuses the
		// heartbeat with the field and the rule, and MemberState.Err shows that error.
		return int(now - prev)
	}
	return Beat{
		Active:         now.Active,
		CompletedDelta: delta(now.Completed, prev.Completed),
		FailedDelta:    delta(now.Failed, prev.Failed),
	}, now
}

// record keeps the outcome of a call on queue: a failure in Err, logged when it follows a success;
// a success's time, and what update adds to the state.
func (m *Member) record(queue string, err error, update func(*MemberState)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		if m.state.Err == nil && !errors.Is(err, context.Canceled) {
			m.log.Warn("worker registry heartbeat failed; retrying", zap.String("queue", queue), zap.Error(err))
		}
		m.state.Err = err
		return
	}
	if m.state.Err != nil {
		m.log.Info("worker registry heartbeats recovered", zap.String("queue", queue))
	}
	m.state.Err, m.state.LastHeartbeat = nil, m.clk.Now()
	if update != nil {
		update(&m.state)
	}
}

// tellDrainer tells the Drainer whether the worker drains now, when that changed since it last heard.
func (m *Member) tellDrainer() {
	draining := m.Draining()
	if draining == m.draining {
		return
	}
	m.draining = draining
	if m.cfg.Drainer != nil {
		m.cfg.Drainer.SetDraining(draining)
	}
}

// Draining reports whether the registry asked this worker to drain on any of its queues, as the
// last heartbeats answered.
func (m *Member) Draining() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, s := range m.state.Status {
		if s == StatusDraining {
			return true
		}
	}
	return false
}

// State returns what the Member knows now (a copy); it makes no network call.
func (m *Member) State() MemberState {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.state
	s.Status = maps.Clone(s.Status)
	s.Load = maps.Clone(s.Load)
	return s
}

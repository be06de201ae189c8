package sim_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/sim"
	"github.com/baton-run/baton/integration/sim/redismodel"
)

// The heartbeat micro-schedule's shape: a fault phase, then a heal phase in which the current
// owner's entry must be written within hbLiveBound and stay.
const (
	hbInterval   = time.Second
	hbTimeout    = 500 * time.Millisecond
	hbKeyTTL     = 10 * time.Second
	hbStep       = 100 * time.Millisecond
	hbFaultPhase = 30 * time.Second
	hbHealPhase  = 10 * time.Second
	// hbLiveBound: the first beat after the heal may still wait out an Interval and a failed write's
	// Timeout, and a regression costs a second round trip.
	hbLiveBound = 2*hbInterval + 2*hbTimeout
	hbProject   = "sim"
	hbQueue     = "q"
)

// Probes a heartbeat batch must hit.
const (
	probeHBRegression = "regression path ran (etcd confirmed a lower token)"
	probeHBRefused    = "superseded writer refused"
	probeHBFlush      = "FLUSHALL recovered by the current owner"
)

var heartbeatProbes = []string{probeHBRegression, probeHBRefused, probeHBFlush}

// hbPlan is the seed's swarm of faults: each is on or off, at its own rate per step.
type hbPlan struct {
	procs                                 int
	elect, restore, flush, restart, down  float64
	delay, etcdDown, staleMax, regressMax float64
}

func drawHBPlan(r *rand.Rand) hbPlan {
	on := func(rate float64) float64 {
		if r.IntN(3) == 0 {
			return 0
		}
		return rate * (0.25 + r.Float64())
	}
	return hbPlan{procs: 2 + r.IntN(2), elect: 0.01 + 0.03*r.Float64(), restore: on(0.01), flush: on(0.01),
		restart: on(0.005), down: on(0.01), delay: on(0.02), etcdDown: on(0.01), staleMax: 4 * r.Float64(),
		regressMax: float64(1 + r.IntN(12))}
}

func (p hbPlan) String() string {
	return fmt.Sprintf("procs=%d elect=%.3f restore=%.3f flush=%.3f restart=%.3f down=%.3f delay=%.3f etcd_down=%.3f stale<=%.1fs regress<=%.0f",
		p.procs, p.elect, p.restore, p.flush, p.restart, p.down, p.delay, p.etcdDown, p.staleMax, p.regressMax)
}

// hbTerm is a term of the small etcd term model: Check is the owner's local view (it passes until
// the owner learns of its end), Confirm asks the model as a linearizable read of etcd would.
type hbTerm struct {
	w      *hbWorld
	id     string
	token  int64
	epoch  int // etcd's history: a restore without --bump-revision starts a new epoch
	ctx    context.Context
	cancel context.CancelFunc
}

func (t *hbTerm) Token() int64             { return t.token }
func (t *hbTerm) LeaderID() string         { return t.id }
func (t *hbTerm) Context() context.Context { return t.ctx }

func (t *hbTerm) Check() error {
	if t.ctx.Err() != nil {
		return fmt.Errorf("%w: the term ended locally", election.ErrNotLeader)
	}
	return nil
}

func (t *hbTerm) Confirm(context.Context) error { return t.w.confirm(t) }

// errEtcdDown is Confirm's answer while etcd is unreachable: neither yes nor no.
var errEtcdDown = errors.New("sim: etcd unavailable")

// hbWorld is one heartbeat schedule.
type hbWorld struct {
	r     *rand.Rand // the fault stream; the scheduler (test goroutine) alone draws from it
	plan  hbPlan
	rec   *sim.Recorder
	redis *redismodel.Server
	key   string
	wg    sync.WaitGroup
	down  bool // Redis unavailable (the scheduler's state)

	mu         sync.Mutex
	rev        int64
	epoch      int
	n          int
	current    *hbTerm
	terms      map[string]*hbTerm
	etcdDown   bool
	last       *heartbeat.Entry
	flushed    bool // a FLUSHALL or restart emptied the store while an owner held the queue
	liveFailed bool
	pending    []string
	violations []string
	probes     map[string]int
}

func (w *hbWorld) confirm(t *hbTerm) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.etcdDown:
		return errEtcdDown
	case w.current != t:
		return fmt.Errorf("%w: etcd holds another term", election.ErrNotLeader)
	}
	return nil
}

// noteLocked buffers a line from any goroutine; the scheduler writes them sorted at the step's end,
// so that goroutine interleaving within a step does not change the trace.
func (w *hbWorld) noteLocked(format string, args ...any) {
	w.pending = append(w.pending, fmt.Sprintf(format, args...))
}

func (w *hbWorld) violateLocked(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	w.violations = append(w.violations, v)
	w.noteLocked("VIOLATION %s", v)
}

func (w *hbWorld) flushNotes() {
	w.mu.Lock()
	lines := w.pending
	w.pending = nil
	w.mu.Unlock()
	sort.Strings(lines)
	for _, l := range lines {
		w.rec.Add("redis", "%s", l)
	}
}

// readEntry reads the entry straight from the store and decodes it as the reconciler does.
func (w *hbWorld) readEntry() (*heartbeat.Entry, error) {
	m := w.redis.Mini()
	fields := map[string]string{}
	for _, f := range []string{heartbeat.FieldWorkflowID, heartbeat.FieldRunID, heartbeat.FieldServerID, heartbeat.FieldToken,
		heartbeat.FieldProject, heartbeat.FieldQueue, heartbeat.FieldUpdatedMs, heartbeat.FieldVersion, heartbeat.FieldFirstRunID} {
		if v := m.HGet(w.key, f); v != "" {
			fields[f] = v
		}
	}
	if len(fields) == 0 {
		return nil, nil
	}
	e, err := heartbeat.Decode(heartbeat.DefaultPrefix, w.key, fields)
	if err != nil {
		return nil, err
	}
	return &e, nil
}

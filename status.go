package baton

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
)

// Status is what a Node knows, for operators (the demo worker serves it as JSON on /status).
type Status struct {
	Project  string        `json:"project"`
	ServerID string        `json:"server_id"`
	Started  bool          `json:"started"`
	Stopped  bool          `json:"stopped"`
	Queues   []QueueStatus `json:"queues"`
	// SessionValidUntil is when this process's queue terms end unless a keepalive succeeds; zero
	// without a live session.
	SessionValidUntil time.Time        `json:"session_valid_until,omitzero"`
	Balance           BalanceStatus    `json:"balance"`
	Reconciler        ReconcilerStatus `json:"reconciler"`
	Worker            WorkerStatus     `json:"worker"`
}

// QueueStatus is one queue as this process sees it.
type QueueStatus struct {
	Queue string `json:"queue"`
	// Leader and LeaderToken are who etcd shows as leader (advisory; empty when nobody leads).
	Leader      string `json:"leader"`
	LeaderToken int64  `json:"leader_token"`
	// Leading is true while this process holds a live term for the queue.
	Leading bool `json:"leading"`
	// Token, Since, WorkflowID and RunID describe this process's term and dispatcher run. RunID is the
	// chain's current run (it follows continue-as-new); FirstRunID is the run the takeover started.
	Token      int64     `json:"token,omitempty"`
	Since      time.Time `json:"since,omitzero"`
	WorkflowID string    `json:"workflow_id,omitempty"`
	RunID      string    `json:"run_id,omitempty"`
	FirstRunID string    `json:"first_run_id,omitempty"`
	// DispatcherOpen is false while this process leads the queue without an open dispatcher run: the
	// takeover is under way, or the run closed and is being replaced.
	DispatcherOpen bool `json:"dispatcher_open"`
	// Replacements counts the runs this process replaced after they closed behind its back.
	Replacements int `json:"replacements"`
	// TakeoverLatency is from the term's start to the run being open.
	TakeoverLatency time.Duration `json:"takeover_latency_ns,omitempty"`
	// Takeovers counts this process's successful takeovers of the queue.
	Takeovers int `json:"takeovers"`
	// LastError is the last takeover or heartbeat failure of the current or last term.
	LastError string `json:"last_error,omitempty"`
	// LastStepDown is why this process's last term of the queue ended.
	LastStepDown string `json:"last_step_down,omitempty"`
	// HandOverWaiting says why this process keeps leading the queue although it would hand it over:
	// it drains, and no other worker stands for the queue (none serves it, or none is up).
	HandOverWaiting string `json:"hand_over_waiting,omitempty"`
	// Workers counts the queue's registered workers by status, as this process last saw them while
	// leading it.
	Workers map[registry.Status]int `json:"workers,omitempty"`
	// Progress is the last progress check of the run this process owns (package progress): a
	// cause when the run makes no progress, and what the run holds; StalledSince is when that cause
	// was first seen.
	Progress     *progress.Report `json:"progress,omitempty"`
	StalledSince time.Time        `json:"stalled_since,omitzero"`
}

// BalanceStatus is this worker's share of the leadership.
type BalanceStatus struct {
	Leading   int `json:"leading"`
	FairShare int `json:"fair_share"`
	Workers   int `json:"workers"`
}

// ReconcilerStatus is the last reconcile cycle this process ran.
type ReconcilerStatus struct {
	Enabled bool               `json:"enabled"`
	Cycles  int                `json:"cycles"`
	Last    *reconciler.Report `json:"last,omitempty"`
}

// WorkerStatus is this process's registration.
type WorkerStatus struct {
	Enabled       bool                       `json:"enabled"`
	Status        map[string]registry.Status `json:"status,omitempty"`
	LastHeartbeat time.Time                  `json:"last_heartbeat,omitzero"`
	LastError     string                     `json:"last_error,omitempty"`
	// Load is what Config.Load last reported per queue, as the registry took it.
	Load map[string]WorkerLoad `json:"load,omitempty"`
}

// Status returns what this process knows now; it makes no network call.
func (n *Node) Status() Status {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := Status{Project: n.cfg.Project, ServerID: n.cfg.ServerID, Started: n.started, Stopped: n.stopped}
	if until, ok := n.queues.SessionValidUntil(); ok {
		st.SessionValidUntil = until
	}
	for _, q := range n.cfg.Queues {
		st.Queues = append(st.Queues, n.queueStatus(n.owned[q].Snapshot()))
	}
	sort.Slice(st.Queues, func(i, j int) bool { return st.Queues[i].Queue < st.Queues[j].Queue })
	st.Balance = BalanceStatus{Leading: n.balance.Leading(), FairShare: n.balance.FairShare(), Workers: n.balance.Workers()}
	if n.rec != nil {
		st.Reconciler.Enabled = true
		if last, runs, ok := n.rec.Last(); ok {
			st.Reconciler.Cycles, st.Reconciler.Last = runs, &last
		}
	}
	if n.member != nil {
		st.Worker = workerStatus(n.member.State())
	}
	return st
}

// workerStatus renders this worker's registration.
func workerStatus(m registry.MemberState) WorkerStatus {
	w := WorkerStatus{Enabled: true, LastHeartbeat: m.LastHeartbeat, LastError: errString(m.Err)}
	if len(m.Status) > 0 {
		w.Status = m.Status
	}
	if len(m.Load) > 0 {
		w.Load = m.Load
	}
	return w
}

// queueStatus is one queue's Status, from its ownership snapshot.
func (n *Node) queueStatus(s ownership.Snapshot[*election.Term]) QueueStatus {
	qs := QueueStatus{Queue: s.Queue, Leader: s.Leader.ID, LeaderToken: s.Leader.Token, Takeovers: s.Takeovers,
		Replacements: s.Replaced, LastError: errString(s.LastErr), LastStepDown: errString(s.LastCause)}
	if !s.Leading {
		return qs
	}
	qs.Leading, qs.Token, qs.Since = true, s.Term.Token(), s.Term.Started()
	qs.WorkflowID, qs.RunID, qs.TakeoverLatency = s.Run.WorkflowID, s.Run.RunID, s.Run.Latency
	qs.FirstRunID, qs.DispatcherOpen = s.Run.FirstRunID, s.Open
	qs.HandOverWaiting = n.balance.HandOverWaiting(s.Queue)
	if !s.Progress.CheckedAt.IsZero() {
		qs.Progress, qs.StalledSince = &s.Progress, s.StalledSince
	}
	qs.Workers = s.Workers
	return qs
}

// Draining reports whether the registry asked this worker to drain on any of its queues
// (registry.Member.Draining); false with the registry disabled.
func (n *Node) Draining() bool { return n.member != nil && n.member.Draining() }

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Errors of the health checks.
var (
	// ErrNotStarted fails readiness before Start and after Stop.
	ErrNotStarted = errors.New("baton: node not running")
	// ErrNoSession fails readiness while this process has no live etcd session (etcd unreachable, or
	// the first campaign has not reached it yet).
	ErrNoSession = errors.New("baton: no live etcd session")
	// ErrWedgedLeader fails liveness when a term of this process is still alive past its lease
	// deadline (ownership.WedgedAfter): the watchdog should have ended it, so the process cannot be
	// trusted.
	ErrWedgedLeader = ownership.ErrWedgedLeader
	// ErrTakeoverFailing fails readiness while a queue's takeover fails in a way that retrying cannot
	// fix (namespace not found, permission denied, invalid argument, an unreadable owner memo), until a
	// takeover of that queue succeeds. The message names the queue and the cause.
	ErrTakeoverFailing = ownership.ErrTakeoverFailing
	// ErrNoDispatcher fails readiness while this process leads a queue without an open dispatcher run
	// for longer than one heartbeat interval (the run closed and could not be replaced yet).
	ErrNoDispatcher = ownership.ErrNoDispatcher
	// ErrDispatcherStalled fails readiness while the dispatcher run of a queue this process leads
	// makes no progress, with the cause its last progress check found (package progress): nobody
	// polls its task queue, a workflow task or the dispatch activity is stuck, its oldest request
	// waits too long, or Temporal does not answer.
	ErrDispatcherStalled = ownership.ErrDispatcherStalled
	// ErrRunsFailing fails readiness while the dispatcher runs of a queue this process leads keep
	// closing right after they start (ownership.Snapshot.RunsFailing: two in a row within
	// ownership.RunFailingWithin of their start): a start hook or a first workflow task that fails
	// every time. Each is replaced (with backoff, Config.Ownership.MaxReplacements per term), so the queue has an open
	// run most of the time and nothing else would show it. The message names the last close.
	ErrRunsFailing = ownership.ErrRunsFailing
	// ErrHeartbeatFailing fails readiness while the dispatcher heartbeat of a queue this process leads
	// has failed for longer than one heartbeat interval (Redis unreachable, or refusing the write: an
	// ACL without a command, a read-only replica). The reconciler would take the run for a dead owner's.
	ErrHeartbeatFailing = ownership.ErrHeartbeatFailing
)

// Live is the liveness check: it fails only when this process still holds a term more than a second
// past the instant its watchdog should have ended it, the one state a restart must end.
func (n *Node) Live() error {
	now := n.cfg.Clock.Now()
	for _, q := range n.cfg.Queues {
		if err := n.owned[q].Snapshot().Wedged(now); err != nil {
			return err
		}
	}
	return nil
}

// Ready is the readiness check: the Node runs, has a live etcd session, passes Live, no queue's
// takeover fails for good, every queue it leads has an open dispatcher run (allowing one heartbeat
// interval for a takeover or a replacement under way), and every check added with AddReadinessCheck
// passes.
func (n *Node) Ready() error {
	n.mu.Lock()
	running := n.started && !n.stopped
	n.mu.Unlock()
	if !running {
		return ErrNotStarted
	}
	if _, ok := n.queues.SessionValidUntil(); !ok {
		return ErrNoSession
	}
	if err := n.Live(); err != nil {
		return err
	}
	if err := n.queueReadiness(); err != nil {
		return err
	}
	n.mu.Lock()
	checks := n.checks
	n.mu.Unlock()
	for _, c := range checks {
		if err := c.check(); err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
	}
	return nil
}

// readinessCheck is one of the application's additions to Ready.
type readinessCheck struct {
	name  string
	check func() error
}

// AddReadinessCheck adds check to Ready: readiness fails, naming the check, whenever it returns an
// error. It is for what the application runs beside the Node and cannot do without, the dispatch
// ledger above all (ledger.Etcd.Check): a worker whose ledger cannot write completes no
// dispatch, however healthy its leadership is. check must be cheap and must not block.
func (n *Node) AddReadinessCheck(name string, check func() error) error {
	if name == "" || check == nil {
		return fmt.Errorf("%w: a readiness check needs a name and a function", ErrInvalidConfig)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.checks = append(slices.Clip(n.checks), readinessCheck{name: name, check: check})
	return nil
}

// queueReadiness is the per-queue part of Ready: each queue's own verdict (ownership.Snapshot.Health),
// with one heartbeat interval for a takeover or a replacement under way.
func (n *Node) queueReadiness() error {
	now := n.cfg.Clock.Now()
	for _, q := range n.cfg.Queues {
		if err := n.owned[q].Snapshot().Health(now, n.cfg.Heartbeat.Interval); err != nil {
			return err
		}
	}
	return nil
}

// HealthCheck adapts a check to the shape of client-go's healthz checkers (Name, Check).
type HealthCheck struct {
	name  string
	check func() error
}

// Name names the check.
func (h HealthCheck) Name() string { return h.name }

// Check runs it.
func (h HealthCheck) Check(*http.Request) error { return h.check() }

// ServeHTTP answers 200 "ok" or 503 with the reason.
func (h HealthCheck) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if err := h.check(); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintf(w, "%s: %v\n", h.name, err)
		return
	}
	fmt.Fprintf(w, "ok\n")
}

// LivenessCheck returns Live as an HTTP handler and healthz checker.
func (n *Node) LivenessCheck() HealthCheck { return HealthCheck{name: "baton-live", check: n.Live} }

// ReadinessCheck returns Ready as an HTTP handler and healthz checker.
func (n *Node) ReadinessCheck() HealthCheck { return HealthCheck{name: "baton-ready", check: n.Ready} }

package temporalmodel

import (
	"fmt"
	"sort"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/baton-run/baton/clock"
)

// Options configure a Model.
type Options struct {
	// Clock stamps start and close times. Default: clock.Real() (the bubble's time under synctest).
	Clock clock.Clock
	// TerminateIgnoresRunID is a planted bug: terminate ends the current run whatever run ID the
	// request names. Only the conformance test's proof of power sets it.
	TerminateIgnoresRunID bool
	// VisibilityLag, when set, is how long visibility takes to show a change of a run: called once
	// when a run starts (closing false: its row is listed that long after) and once when it closes
	// (its row shows RUNNING that long after). Default: no lag. See List.
	VisibilityLag func(closing bool) time.Duration
}

// Run is one run of a workflow ID, as the model holds it.
type Run struct {
	WorkflowID   string
	RunID        string
	FirstRunID   string
	RequestID    string
	WorkflowType string
	TaskQueue    string
	Status       enumspb.WorkflowExecutionStatus
	StartTime    time.Time
	CloseTime    time.Time
	Memo         *commonpb.Memo
	// Reason is the termination reason, or the failure message.
	Reason string
	// NextRunID is the run this one continued as (continue-as-new), or "".
	NextRunID string
	// Signals counts the signals of signal-with-start the run received.
	Signals int
	// Input is the run's input, as its started event carries it.
	Input *commonpb.Payloads
	// events is the run's history (history.go), its event IDs from 1.
	events []*historypb.HistoryEvent
	// listedAt and closeListedAt are when visibility shows the run's row, and its close (visibility.go).
	listedAt, closeListedAt time.Time
	// closed is closed when the run closes; long polls wait on it.
	closed chan struct{}
}

// Open reports whether the run is running.
func (r *Run) Open() bool { return r.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING }

// Model is the modelled Temporal namespace. It is safe for concurrent use.
type Model struct {
	opts Options

	mu   sync.Mutex
	runs map[string][]*Run // by workflow ID, oldest first
	seq  int
}

// New returns an empty Model.
func New(opts Options) *Model {
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	return &Model{opts: opts, runs: map[string][]*Run{}}
}

// newRunID returns a fresh run ID: deterministic (a counter), so the same seed gives the same trace.
func (m *Model) newRunID() string {
	m.seq++
	return fmt.Sprintf("00000000-0000-4000-8000-%012d", m.seq)
}

// latest is the workflow's latest run (the current one, open or not), or nil.
func (m *Model) latest(id string) *Run {
	rs := m.runs[id]
	if len(rs) == 0 {
		return nil
	}
	return rs[len(rs)-1]
}

// find returns run runID of id, or the latest run when runID is "".
func (m *Model) find(id, runID string) *Run {
	if runID == "" {
		return m.latest(id)
	}
	for _, r := range m.runs[id] {
		if r.RunID == runID {
			return r
		}
	}
	return nil
}

// close ends r with status; for continue-as-new (next != "") the chain goes on in next.
func (m *Model) close(r *Run, status enumspb.WorkflowExecutionStatus, reason, next string) {
	r.Status, r.Reason, r.NextRunID, r.CloseTime = status, reason, next, m.opts.Clock.Now()
	r.closeListedAt = r.CloseTime.Add(m.lag(true))
	m.appendLocked(r, closeEvent(r))
	close(r.closed)
}

// add appends a new open run of id, its history the started event (continued from prior, for
// continue-as-new).
func (m *Model) add(id, firstRunID, requestID, wfType, taskQueue string, memo *commonpb.Memo, input *commonpb.Payloads, prior string) *Run {
	r := &Run{WorkflowID: id, RunID: m.newRunID(), RequestID: requestID, WorkflowType: wfType, TaskQueue: taskQueue,
		Status: enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, StartTime: m.opts.Clock.Now(), Memo: memo, Input: input,
		closed: make(chan struct{})}
	r.FirstRunID = firstRunID
	if r.FirstRunID == "" {
		r.FirstRunID = r.RunID
	}
	r.listedAt = r.StartTime.Add(m.lag(false))
	m.appendLocked(r, startedEvent(r, prior))
	m.runs[id] = append(m.runs[id], r)
	return r
}

// lag is the next visibility lag.
func (m *Model) lag(closing bool) time.Duration {
	if m.opts.VisibilityLag == nil {
		return 0
	}
	return m.opts.VisibilityLag(closing)
}

// Runs returns a copy of every run of id, oldest first.
func (m *Model) Runs(id string) []Run {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Run, 0, len(m.runs[id]))
	for _, r := range m.runs[id] {
		c := *r
		c.closed, c.events = nil, nil
		out = append(out, c)
	}
	return out
}

// Open returns a copy of id's open run, if any.
func (m *Model) Open(id string) (Run, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r := m.latest(id); r != nil && r.Open() {
		c := *r
		c.closed, c.events = nil, nil
		return c, true
	}
	return Run{}, false
}

// IDs returns every workflow ID the model knows, sorted.
func (m *Model) IDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	ids := make([]string, 0, len(m.runs))
	for id := range m.runs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

package sim

import (
	"bytes"
	"fmt"
	"hash"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/baton-run/baton/clock"
)

// Recorder keeps a schedule's trace: one line per delivery, fault, callback and violation, stamped
// with the simulated time since the schedule began.
type Recorder struct {
	clk   clock.Clock
	start time.Time
	keep  bool // keep the lines (a replay), not only their hash

	mu    sync.Mutex
	hash  hash.Hash64 // of every settled line, each ended by a newline
	lines []string    // the kept lines, settled ones first
	steps bool        // the scheduler settles each step (InSteps)
	step  [][]byte    // the lines since the last Settle, each ended by a newline
}

// NewRecorder starts a trace at the clock's now; keep keeps the lines for a timeline.
func NewRecorder(clk clock.Clock, keep bool) *Recorder {
	return &Recorder{clk: clk, start: clk.Now(), keep: keep, hash: fnv.New64a()}
}

// Add records one line for who (a process, "world", "etcd"). It runs at every step of a schedule,
// so it formats the line once, into one buffer; the line joins the step's, which Settle orders.
func (r *Recorder) Add(who, format string, args ...any) {
	line := fmt.Appendf(nil, "%10.3fs %-8s ", r.clk.Now().Sub(r.start).Seconds(), who)
	line = append(fmt.Appendf(line, format, args...), '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.steps {
		r.step = append(r.step, line)
		return
	}
	r.writeLocked(line)
}

// InSteps makes the recorder order its lines step by step: from now on a line waits for the next
// Settle. Without it, every line is settled as it is added, in the order the goroutines added it.
func (r *Recorder) InSteps() *Recorder {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.steps = true
	return r
}

// Settle ends a step: the scheduler of a recorder InSteps calls it whenever the bubble is quiescent
// (after synctest.Wait). The goroutines a step woke ran in an order the Go runtime chose, not the seed (golang/go#67690),
// so the lines they added are put in one canonical order (time, who, text) before they join the
// hash and the timeline: two runs of a seed that did the same things have the same trace, and a
// replay that diverged differs in what happened, not in which goroutine logged first.
func (r *Recorder) Settle() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleLocked()
}

func (r *Recorder) settleLocked() {
	slices.SortFunc(r.step, bytes.Compare)
	for _, line := range r.step {
		r.writeLocked(line)
	}
	r.step = r.step[:0]
}

// writeLocked adds a settled line (ended by a newline) to the hash and, if kept, to the timeline.
func (r *Recorder) writeLocked(line []byte) {
	r.hash.Write(line)
	if r.keep {
		r.lines = append(r.lines, string(line[:len(line)-1]))
	}
}

// Hash is the fingerprint of the trace so far (the step in progress settled first).
func (r *Recorder) Hash() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleLocked()
	return r.hash.Sum64()
}

// Timeline is the kept trace (the step in progress settled first).
func (r *Recorder) Timeline() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.settleLocked()
	return strings.Join(r.lines, "\n")
}

package sim

import (
	"fmt"
	"hash"
	"hash/fnv"
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
	hash  hash.Hash64 // of every line so far, each ended by a newline
	lines []string
}

// NewRecorder starts a trace at the clock's now; keep keeps the lines for a timeline.
func NewRecorder(clk clock.Clock, keep bool) *Recorder {
	return &Recorder{clk: clk, start: clk.Now(), keep: keep, hash: fnv.New64a()}
}

// Add records one line for who (a process, "world", "etcd"). It runs at every step of a schedule,
// so it formats the line once, into one buffer, and feeds the running hash the bytes themselves.
func (r *Recorder) Add(who, format string, args ...any) {
	line := fmt.Appendf(nil, "%10.3fs %-8s ", r.clk.Now().Sub(r.start).Seconds(), who)
	line = append(fmt.Appendf(line, format, args...), '\n')
	r.mu.Lock()
	defer r.mu.Unlock()
	r.hash.Write(line)
	if r.keep {
		r.lines = append(r.lines, string(line[:len(line)-1]))
	}
}

// Hash is the fingerprint of the trace so far.
func (r *Recorder) Hash() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hash.Sum64()
}

// Timeline is the kept trace.
func (r *Recorder) Timeline() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

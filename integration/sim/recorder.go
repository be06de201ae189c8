package sim

import (
	"fmt"
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
	hash  uint64
	lines []string
}

// NewRecorder starts a trace at the clock's now; keep keeps the lines for a timeline.
func NewRecorder(clk clock.Clock, keep bool) *Recorder {
	return &Recorder{clk: clk, start: clk.Now(), keep: keep, hash: fnv.New64a().Sum64()}
}

// Add records one line for who (a process, "world", "etcd").
func (r *Recorder) Add(who, format string, args ...any) {
	line := fmt.Sprintf("%10.3fs %-8s %s", r.clk.Now().Sub(r.start).Seconds(), who, fmt.Sprintf(format, args...))
	r.mu.Lock()
	defer r.mu.Unlock()
	h := fnv.New64a()
	fmt.Fprintf(h, "%016x%s", r.hash, line)
	r.hash = h.Sum64()
	if r.keep {
		r.lines = append(r.lines, line)
	}
}

// Hash is the fingerprint of the trace so far.
func (r *Recorder) Hash() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hash
}

// Timeline is the kept trace.
func (r *Recorder) Timeline() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}

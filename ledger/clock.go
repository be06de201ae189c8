package ledger

import "github.com/baton-run/baton/clock"

// SetClock makes the watch read c (default the real clock) for the times of the completions it sees
// and the pace of WaitFor's progress requests. Call it before Run.
func (w *Watch) SetClock(c clock.Clock) { w.clock = c }

func (w *Watch) clk() clock.Clock {
	if w.clock == nil {
		return clock.Real()
	}
	return w.clock
}

package dispatcher

import "github.com/baton-run/baton/clock"

func (a *Activities) clk() clock.Clock {
	if a.Clock == nil {
		return clock.Real()
	}
	return a.Clock
}

package dispatcher

import "github.com/baton-run/baton/clock"

// SetClock makes the ledger read c (default the real clock) for its lease rotation, the age of a
// failing streak (Check) and the renewals of attempts' claims. Call it before the ledger's first use.
// Lease TTLs and record expiry are always etcd's.
func (l *EtcdLedger) SetClock(c clock.Clock) { l.clock = c }

// SetClock makes the watch read c (default the real clock) for the times of the completions it sees
// and the pace of WaitFor's progress requests. Call it before Run.
func (w *LedgerWatch) SetClock(c clock.Clock) { w.clock = c }

func (l *EtcdLedger) clk() clock.Clock { return orReal(l.clock) }

func (w *LedgerWatch) clk() clock.Clock { return orReal(w.clock) }

func (a *Activities) clk() clock.Clock { return orReal(a.Clock) }

func orReal(c clock.Clock) clock.Clock {
	if c == nil {
		return clock.Real()
	}
	return c
}

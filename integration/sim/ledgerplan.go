package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/baton-run/baton/ledger"
)

// The faults of the ledger world (besides the network's).
const (
	LedgerFaultRevoke   = "revoke-ledger-lease" // an operator revokes the current owner's ledger lease
	LedgerFaultPause    = "pause"               // the current owner's traffic held (a pause past a lease's life)
	LedgerFaultNoLeader = "no-leader"           // a window without a raft leader
	LedgerFaultChange   = "leader-change"       // a raft-leader change (every lease gets its full TTL again)
	LedgerFaultCompact  = "compact"             // an auto-compactor
	ledgerSupersede     = "supersede"           // the next owner's term begins (not a fault: the plan's spine)
)

// ledgerRetention is the ledger's record retention in the simulator: the shortest the ledger accepts,
// so that a schedule sees leases rotate (every half of it) and records expire.
const ledgerRetention = ledger.MinRetention

// ledgerHealBound is how long after the heal the current owner's Begin and Complete must have
// succeeded: a ledger that cannot write by then is wedged (past bug B2).
const ledgerHealBound = 10 * time.Second

// ledgerFault is one planned event of a ledger schedule.
type ledgerFault struct {
	after time.Duration
	kind  string
	dur   time.Duration
	n     int
}

// ledgerPlan is a ledger schedule drawn from its seed.
type ledgerPlan struct {
	owners   int
	requests [][]string // per owner, the dispatch keys it is asked to handle, in order
	chaos    time.Duration
	net      NetFaults
	on       []string
	faults   []ledgerFault
}

// dispatchKey is the i-th dispatch key of a schedule (the ledger's shape: IsDispatchKey).
func dispatchKey(i int) string { return fmt.Sprintf("%0*x", ledger.DispatchKeyLen, i+1) }

func drawLedgerPlan(s Streams) ledgerPlan {
	r := s.Rand("ledger-plan")
	p := ledgerPlan{owners: 2 + r.IntN(2), chaos: time.Duration(10+r.IntN(60)) * time.Second}
	pool := 3 + r.IntN(6) // a small pool: owners share keys, as a carry-over sends them again
	for range p.owners {
		var keys []string
		for range 3 + r.IntN(6) {
			keys = append(keys, dispatchKey(r.IntN(pool)))
		}
		p.requests = append(p.requests, keys)
	}
	if r.IntN(2) == 0 {
		p.net.DelayRate, p.net.MaxDelay, p.net.Reorder = 0.1+0.4*r.Float64(), time.Duration(1+r.IntN(2000))*time.Millisecond, r.IntN(2) == 0
	}
	if r.IntN(2) == 0 {
		p.net.DropRate = 0.02 + 0.2*r.Float64()
	}
	if r.IntN(2) == 0 {
		p.net.LostRespRate = 0.02 + 0.2*r.Float64()
	}
	p.net.Detect = time.Duration(100+r.IntN(900)) * time.Millisecond
	p.net.DupRate = drawDupRate(s, "ledger")
	for i := 1; i < p.owners; i++ { // owner 0 holds from the start; the others supersede in turn
		at := p.chaos * time.Duration(i) / time.Duration(p.owners)
		p.faults = append(p.faults, ledgerFault{after: at + time.Duration(r.Int64N(int64(time.Second))), kind: ledgerSupersede, n: i})
	}
	for _, k := range []string{LedgerFaultRevoke, LedgerFaultPause, LedgerFaultNoLeader, LedgerFaultChange, LedgerFaultCompact} {
		if r.IntN(2) == 0 {
			continue
		}
		p.on = append(p.on, k)
		p.faults = append(p.faults, drawLedgerFaults(r.IntN, r.Int64N, k, p.chaos)...)
	}
	for i, e := range drawRestores(s, "ledger", p.chaos) {
		p.on = append(p.on, e.String())
		p.faults = append(p.faults, ledgerFault{after: e.snapAt, kind: faultSnapshot, n: i}, ledgerFault{after: e.at, kind: e.kind(), n: i})
	}
	sort.SliceStable(p.faults, func(i, j int) bool { return p.faults[i].after < p.faults[j].after })
	return p
}

// drawLedgerFaults places the events of one kind of fault in the chaos phase.
func drawLedgerFaults(intN func(int) int, int64N func(int64) int64, kind string, chaos time.Duration) []ledgerFault {
	var out []ledgerFault
	switch kind {
	case LedgerFaultCompact:
		every := time.Duration(500+intN(3000)) * time.Millisecond
		for at := every; at < chaos; at += every {
			out = append(out, ledgerFault{after: at, kind: kind, n: intN(6)})
		}
	case LedgerFaultRevoke:
		// One revoke often lands in the last seconds before the heal, when nothing rotates the lease
		// before the heal's deadline: a ledger that never grants a new one stays wedged through it.
		if intN(2) == 0 {
			out = append(out, ledgerFault{after: chaos - time.Duration(int64N(int64(3*time.Second))), kind: kind})
		}
		fallthrough
	default:
		for range 1 + intN(3) {
			dur := time.Duration(300+intN(3000)) * time.Millisecond
			if kind == LedgerFaultPause {
				dur = time.Duration(1+intN(40)) * time.Second // sometimes past a lease's rotation or its life
			}
			out = append(out, ledgerFault{after: time.Duration(int64N(int64(chaos))), kind: kind, dur: dur})
		}
	}
	return out
}

func (p ledgerPlan) String() string {
	return fmt.Sprintf("owners=%d chaos=%v faults=[%s] delay=%.2f/%v reorder=%v drop=%.3f lost=%.3f dup=%.3f detect=%v",
		p.owners, p.chaos, strings.Join(p.on, ","), p.net.DelayRate, p.net.MaxDelay, p.net.Reorder, p.net.DropRate,
		p.net.LostRespRate, p.net.DupRate, p.net.Detect)
}

package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Balance fault kinds: a drain and its undrain (the registry's DRAINING status, Runner.SetDraining),
// a crash and its restart (a leave and a join, with a new server ID).
const (
	BalanceDrain   = "drain"
	BalanceUndrain = "undrain"
	BalanceCrash   = "crash"
	BalanceRestart = "restart"
	BalanceDeploy  = "deploy" // a rolling deploy's step: a process's v2 incarnation starts, then its v1 one stops
)

// balancePlan is one seed's balance world: who serves which queue, the network rates, the faults of
// the chaos phase, and the worker drained at the heal (-1: none).
type balancePlan struct {
	serves      [][]string // per process: the queues it serves, a seeded subset
	queues      []string
	solo        int // the process that alone serves queues[0]
	phases      balancePhases
	net         NetFaults
	events      []faultEvent // times relative to the start
	drainAtHeal int
	versioned   bool // processes start at v1 (a rolling deploy to v2 may follow); else unversioned
}

// balancePhases are the phases after the chaos: the heal itself, a settle window for the handovers it starts,
// and the stable window in which no queue may change owner.
type balancePhases struct{ chaos, settle, stable time.Duration }

func drawBalancePlan(s Streams) balancePlan {
	r := s.Rand("balance-plan")
	nodes, queues := 3+r.IntN(3), 2+r.IntN(7)
	p := balancePlan{solo: r.IntN(nodes), serves: make([][]string, nodes), drainAtHeal: -1,
		phases: balancePhases{chaos: 60 * time.Second, settle: 40 * time.Second, stable: 20 * time.Second}}
	for q := range queues {
		p.queues = append(p.queues, fmt.Sprintf("q%d", q))
	}
	p.serves[p.solo] = append(p.serves[p.solo], p.queues[0]) // served by one worker only
	for _, q := range p.queues[1:] {
		served := false
		for i := range nodes {
			if r.IntN(2) == 0 {
				p.serves[i], served = append(p.serves[i], q), true
			}
		}
		if !served {
			i := r.IntN(nodes)
			p.serves[i] = append(p.serves[i], q)
		}
	}
	for i := range p.serves {
		if len(p.serves[i]) == 0 { // every process serves something
			p.serves[i] = append(p.serves[i], p.queues[1+r.IntN(queues-1)])
		}
	}
	p.net = drawBalanceNet(r)
	p.net.DupRate = drawDupRate(s, "balance")
	p.events = drawBalanceEvents(r, nodes, p.phases.chaos)
	if p.versioned = r.IntN(2) == 0; p.versioned && r.IntN(2) == 0 {
		at := time.Duration(5+r.IntN(30)) * time.Second
		for i := range nodes { // one process every 4-8 s, in order
			p.events = append(p.events, faultEvent{after: at, kind: BalanceDeploy, node: i})
			at += time.Duration(4000+r.IntN(4000)) * time.Millisecond
		}
		sort.SliceStable(p.events, func(i, j int) bool { return p.events[i].after < p.events[j].after })
	}
	if r.IntN(4) != 0 {
		p.drainAtHeal = p.solo
	}
	for i, e := range drawRestores(s, "balance", p.phases.chaos) {
		p.events = append(p.events, faultEvent{after: e.snapAt, kind: faultSnapshot, n: i}, faultEvent{after: e.at, kind: e.kind(), n: i})
	}
	sort.SliceStable(p.events, func(i, j int) bool { return p.events[i].after < p.events[j].after })
	return p
}

func drawBalanceNet(r *rand.Rand) NetFaults {
	var f NetFaults
	if r.IntN(2) == 0 {
		f.DelayRate, f.MaxDelay = r.Float64()*0.3, time.Duration(1+r.IntN(1500))*time.Millisecond
	}
	f.Reorder = r.IntN(2) == 0
	if r.IntN(3) == 0 {
		f.DropRate = r.Float64() * 0.05
	}
	if r.IntN(3) == 0 {
		f.LostRespRate = r.Float64() * 0.05
	}
	f.Detect = time.Duration(500+r.IntN(2000)) * time.Millisecond
	return f
}

// drawBalanceEvents draws drains and crashes (each with its end) within the chaos phase.
func drawBalanceEvents(r *rand.Rand, nodes int, chaos time.Duration) []faultEvent {
	var out []faultEvent
	for _, k := range []string{BalanceDrain, BalanceCrash} {
		if r.IntN(4) == 0 {
			continue
		}
		for range 1 + r.IntN(3) {
			at, dur := time.Duration(r.Int64N(int64(chaos))), time.Duration(2000+r.IntN(15000))*time.Millisecond
			f := faultEvent{after: at, kind: k, node: r.IntN(nodes), dur: dur}
			end := f
			end.after, end.kind = at+dur, BalanceUndrain
			if k == BalanceCrash {
				end.kind = BalanceRestart
			}
			out = append(out, f)
			if end.after < chaos {
				out = append(out, end)
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].after < out[j].after })
	return out
}

func (p balancePlan) String() string {
	var serves []string
	for i, qs := range p.serves {
		serves = append(serves, fmt.Sprintf("p%d:%s", i, strings.Join(qs, "+")))
	}
	var evs []string
	for _, e := range p.events {
		evs = append(evs, fmt.Sprintf("%s(p%d)@%v", e.kind, e.node, e.after))
	}
	return fmt.Sprintf("serves=[%s] solo=p%d drainAtHeal=%d versioned=%v events=[%s] delay=%.2f/%v reorder=%v drop=%.3f lost=%.3f dup=%.3f",
		strings.Join(serves, " "), p.solo, p.drainAtHeal, p.versioned, strings.Join(evs, " "), p.net.DelayRate, p.net.MaxDelay,
		p.net.Reorder, p.net.DropRate, p.net.LostRespRate, p.net.DupRate)
}

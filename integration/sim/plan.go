package sim

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Fault kinds a seed may turn on (swarm testing: each seed a different subset, at different rates).
const (
	FaultCrash        = "crash"
	FaultPartition    = "partition"
	FaultStall        = "stall"
	FaultRevoke       = "revoke"
	FaultNoLeader     = "no-leader"
	FaultLeaderChange = "leader-change"
	FaultCompact      = "compact"
	// FaultStop is a graceful stop, a rolling deploy's step: the process's next incarnation starts
	// and the current one resigns its terms, draining their callbacks first; in half the stops etcd
	// is out of its reach until just after its session's validity ends (World.stop).
	FaultStop = "stop"
)

var faultKinds = []string{FaultCrash, FaultPartition, FaultStall, FaultRevoke, FaultNoLeader, FaultLeaderChange, FaultCompact, FaultStop}

// plan is one seed's world: sizes, phases, network rates and the faults with their times.
type plan struct {
	nodes, queues int
	chaos, heal   time.Duration
	net           NetFaults
	on            []string
	faults        []faultEvent // times relative to the start
	restores      []restoreEvent
	skews         []float64 // per process slot: its clock's rate (nil: none skewed)
	healed        bool      // the heal is still to do
}

type faultEvent struct {
	at    time.Time // absolute once events() placed it
	after time.Duration
	kind  string
	node  int
	dur   time.Duration
	n     int
}

func drawPlan(s Streams) plan {
	r := s.Rand("plan")
	p := plan{nodes: 3 + r.IntN(3), queues: 1 + r.IntN(8), chaos: 60 * time.Second, heal: 30 * time.Second, healed: true}
	if r.IntN(2) == 0 {
		p.net.DelayRate, p.net.MaxDelay = r.Float64()*0.5, time.Duration(1+r.IntN(4000))*time.Millisecond
	}
	p.net.Reorder = r.IntN(2) == 0
	if r.IntN(3) == 0 {
		p.net.DropRate = r.Float64() * 0.1
	}
	if r.IntN(3) == 0 {
		p.net.LostRespRate = r.Float64() * 0.1
	}
	p.net.Detect = time.Duration(500+r.IntN(3000)) * time.Millisecond
	for _, k := range faultKinds {
		if r.IntN(2) != 0 {
			continue
		}
		p.on = append(p.on, k)
		if k == FaultCompact { // an auto-compactor: every 0.2-2 s, keeping 0-5 revisions
			every := time.Duration(200+r.IntN(1800)) * time.Millisecond
			for at := every; at < p.chaos; at += every {
				p.faults = append(p.faults, faultEvent{after: at, kind: k, n: r.IntN(6)})
			}
			continue
		}
		for range 1 + r.IntN(3) {
			p.faults = append(p.faults, faultEvent{after: time.Duration(r.Int64N(int64(p.chaos))), kind: k,
				node: r.IntN(p.nodes), dur: time.Duration(500+r.IntN(8000)) * time.Millisecond, n: r.IntN(6)})
		}
	}
	sort.SliceStable(p.faults, func(i, j int) bool { return p.faults[i].after < p.faults[j].after })
	p.restores = drawRestores(s, "election", p.chaos)
	p.net.DupRate = drawDupRate(s, "election")
	return p
}

func (p plan) String() string {
	return fmt.Sprintf("nodes=%d queues=%d faults=[%s] restores=%v skews=%.3f delay=%.2f/%v reorder=%v drop=%.3f lost=%.3f dup=%.3f detect=%v",
		p.nodes, p.queues, strings.Join(p.on, ","), p.restores, p.skews, p.net.DelayRate, p.net.MaxDelay, p.net.Reorder, p.net.DropRate,
		p.net.LostRespRate, p.net.DupRate, p.net.Detect)
}

// events places the faults (and their ends) on the schedule's clock.
func (p plan) events(start time.Time) []faultEvent {
	var out []faultEvent
	for _, f := range p.faults {
		f.at = start.Add(f.after)
		out = append(out, f)
		switch f.kind {
		case FaultCrash, FaultPartition, FaultNoLeader:
			end := f
			end.kind, end.at = f.kind+"-end", f.at.Add(f.dur)
			if f.kind == FaultCrash {
				end.kind = "restart"
			}
			if end.at.Before(start.Add(p.chaos)) {
				out = append(out, end)
			}
		}
	}
	for i, r := range p.restores {
		out = append(out, faultEvent{at: start.Add(r.snapAt), kind: faultSnapshot, n: i},
			faultEvent{at: start.Add(r.at), kind: r.kind(), n: i})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

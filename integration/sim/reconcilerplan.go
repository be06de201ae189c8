package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// The faults of the reconciler world (besides the etcd network's and the Temporal network's).
const (
	RecFaultCrash     = "crash"         // a process dies: its runs and heartbeat entries stay behind
	RecFaultPause     = "pause"         // a process's etcd traffic held past the TTL (its terms end; it learns late)
	RecFaultPartition = "partition"     // a process cut off from etcd
	RecFaultRevoke    = "revoke-rec"    // the reconciler leader's lease revoked: its term ends mid-cycle
	RecFaultFlush     = "redis-flush"   // FLUSHALL: every heartbeat entry gone, the runs stay
	RecFaultGarbage   = "redis-garbage" // an entry Baton did not write under the project's keys
	RecFaultRedisDown = "redis-down"    // Redis unavailable: live owners' entries go stale
	RecFaultRemove    = "remove-queue"  // a queue dropped from every process's configuration; its owner dies with it
	RecFaultFleet     = "fleet-crash"   // every process dies at once (a power loss); all come back together
	recFaultNoLeader  = "no-leader"     // a window without a raft leader
	recRestart        = "restart"       // a crashed process comes back (a new server ID)
	recFleetRestart   = "fleet-restart" // every crashed process comes back
	recPartitionEnd   = "partition-end" // the partition heals
	recRedisUp        = "redis-up"      // Redis answers again
	recNoLeaderEnd    = "no-leader-end" // etcd has a leader again
)

var recFaultKinds = []string{RecFaultCrash, RecFaultPause, RecFaultPartition, RecFaultRevoke, RecFaultFlush, RecFaultGarbage,
	RecFaultRedisDown, RecFaultRemove, recFaultNoLeader, RecFaultFleet}

// The reconciler world's timing: short enough that a schedule sees many cycles and vacancies.
const (
	recChaos = 45 * time.Second
	// recInterval, recStaleAfter: the reconciler's cycle and staleness (its Config); the heartbeat
	// writers beat every recBeat. An entry is stale after recStaleAfter; a vacancy is cleaned about
	// electionTTL + OrphanGrace (3 s + 3 s) after its owner died, before its entry is stale: the world
	// tells the orphan watch's terminations from the cycle's by the entry's age.
	recInterval   = 10 * time.Second
	recStaleAfter = 8 * time.Second
	recBeat       = time.Second
	recKeyTTL     = 10 * time.Minute
	// recHealBound is the reconciler's promise after the heal, with a margin for the takeovers and
	// the rate limiter: the dead reconciler leader's lease runs out (TTL), the next one's first cycle
	// finds every entry that is stale, the next cycle (Interval, jittered by a tenth) the ones that
	// were not yet, and the sweep every run without an entry.
	recHealBound = recElectionTTL + recStaleAfter + recInterval*11/10 + 10*time.Second
	// recElectionTTL is the reconciler Elector's lease TTL: not the queues' electionTTL, so that the
	// two Electors of a process, which share its client, send LeaseGrants the Net tells apart (two
	// identical requests in flight at once would get their leases in the Go runtime's order).
	recElectionTTL = 4 * time.Second
	// recCallTimeout bounds every call of the reconciler and the takeovers.
	recCallTimeout = 2 * time.Second
)

// recFault is one planned event of a reconciler schedule.
type recFault struct {
	after time.Duration
	kind  string
	node  int
	dur   time.Duration
	n     int
}

// temporalFaults are the Temporal network's rates for one schedule, and visibility's lag.
type temporalFaults struct {
	delay, dropBefore, lostResp float64
	maxDelay                    time.Duration
	lagRate                     float64       // share of visibility changes that lag
	maxLag                      time.Duration // longest lag
	listLatency                 time.Duration // longest latency of a visibility page
	pageSize                    int           // the reconciler's SweepPageSize
	// rate and burst are the reconciler's TerminateRate and TerminateBurst: slow in half the seeds,
	// so that a cleanup waits its turn between its look at the queue's leader and its acts.
	rate  float64
	burst int
}

// recPlan is one seed's reconciler world.
type recPlan struct {
	nodes, queues int
	net           NetFaults
	temporal      temporalFaults
	on            []string
	faults        []recFault
}

func drawRecPlan(s Streams) recPlan {
	return drawRecPlanOf(s.Rand("reconciler-plan"), recFaultKinds, recEnd)
}

// drawRecPlanOf draws a plan of the reconciler world's shape from r, with faults of kinds, each
// followed by the event end names (if any) once its duration is over: the node world's plan too.
func drawRecPlanOf(r *rand.Rand, kinds []string, end func(kind string) string) recPlan {
	p := recPlan{nodes: 3 + r.IntN(3), queues: 2 + r.IntN(7)}
	if r.IntN(2) == 0 {
		p.net.DelayRate, p.net.MaxDelay = r.Float64()*0.4, time.Duration(1+r.IntN(2000))*time.Millisecond
	}
	p.net.Reorder = r.IntN(2) == 0
	if r.IntN(3) == 0 {
		p.net.DropRate = r.Float64() * 0.1
	}
	if r.IntN(3) == 0 {
		p.net.LostRespRate = r.Float64() * 0.1
	}
	p.net.Detect = time.Duration(200+r.IntN(1500)) * time.Millisecond
	on := func(rate float64) float64 {
		if r.IntN(2) == 0 {
			return 0
		}
		return rate * r.Float64()
	}
	p.temporal = temporalFaults{delay: on(0.5), dropBefore: on(0.1), lostResp: on(0.1), maxDelay: time.Duration(1+r.IntN(1500)) * time.Millisecond,
		lagRate: on(1), maxLag: time.Duration(1+r.IntN(5000)) * time.Millisecond, listLatency: time.Duration(r.IntN(1500)) * time.Millisecond,
		pageSize: 1 + r.IntN(4), rate: 20, burst: 5}
	if r.IntN(2) == 0 {
		p.temporal.rate, p.temporal.burst = 0.2+2*r.Float64(), 1
	}
	for _, k := range kinds {
		if r.IntN(2) != 0 {
			continue
		}
		p.on = append(p.on, k)
		for range 1 + r.IntN(3) {
			f := recFault{after: time.Duration(r.Int64N(int64(recChaos - 5*time.Second))), kind: k, node: r.IntN(p.nodes),
				dur: time.Duration(500+r.IntN(12000)) * time.Millisecond, n: r.IntN(p.queues)}
			p.faults = append(p.faults, f)
			if end := end(k); end != "" && f.after+f.dur < recChaos {
				p.faults = append(p.faults, recFault{after: f.after + f.dur, kind: end, node: f.node})
			}
		}
	}
	sort.SliceStable(p.faults, func(i, j int) bool { return p.faults[i].after < p.faults[j].after })
	return p
}

// recEnd is the event that ends a fault of kind ("": none, or the heal ends it).
func recEnd(kind string) string {
	switch kind {
	case RecFaultCrash:
		return recRestart
	case RecFaultFleet:
		return recFleetRestart
	case RecFaultPartition:
		return recPartitionEnd
	case RecFaultRedisDown:
		return recRedisUp
	case recFaultNoLeader:
		return recNoLeaderEnd
	}
	return ""
}

func (p recPlan) String() string {
	t := p.temporal
	return fmt.Sprintf("nodes=%d queues=%d faults=[%s] delay=%.2f/%v reorder=%v drop=%.3f lost=%.3f detect=%v "+
		"temporal(delay=%.2f/%v drop=%.3f lost=%.3f lag=%.2f/%v list=%v page=%d rate=%.2f/%d)",
		p.nodes, p.queues, strings.Join(p.on, ","), p.net.DelayRate, p.net.MaxDelay, p.net.Reorder, p.net.DropRate, p.net.LostRespRate,
		p.net.Detect, t.delay, t.maxDelay, t.dropBefore, t.lostResp, t.lagRate, t.maxLag, t.listLatency, t.pageSize, t.rate, t.burst)
}

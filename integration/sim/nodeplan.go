package sim

import (
	"sort"
	"time"
)

// The faults only the node world has (besides the reconciler world's, which it draws too).
const (
	NodeFaultStop     = "stop"     // a graceful stop (Quiesce, then Stop); the process comes back (a new server ID) later
	NodeFaultRollout  = "rollout"  // a rolling deploy: each process in turn replaced by one of the next version
	NodeFaultDrain    = "drain"    // an operator drains a worker on every queue in the registry; undrained later
	NodeFaultTransfer = "transfer" // an operator moves queue n to process node (balance.RequestTransfer, `baton transfer`)
	nodeUndrain       = "undrain"  // the drain taken back
	nodeDeploy        = "deploy"   // one step of a rolling deploy: node is the process, n the rollout
)

var nodeFaultKinds = []string{RecFaultCrash, RecFaultPause, RecFaultPartition, RecFaultRevoke, RecFaultFlush, RecFaultGarbage,
	RecFaultRedisDown, recFaultNoLeader, RecFaultFleet, NodeFaultStop, NodeFaultRollout, NodeFaultDrain, NodeFaultTransfer}

// nodeEnd is the event that ends a fault of kind ("": none, or the heal ends it).
func nodeEnd(kind string) string {
	switch kind {
	case NodeFaultStop:
		return recRestart
	case NodeFaultDrain:
		return nodeUndrain
	}
	return recEnd(kind)
}

// drawNodePlan draws a node schedule: the reconciler world's shape with the node world's faults, each
// rolling deploy spread into one step per process, 0.6-3 s apart, all within the chaos phase.
func drawNodePlan(s Streams) recPlan {
	p := drawRecPlanOf(s.Rand("node-plan"), nodeFaultKinds, nodeEnd)
	var out []recFault
	rollouts := 0
	for _, f := range p.faults {
		if f.kind != NodeFaultRollout {
			out = append(out, f)
			continue
		}
		gap := 500*time.Millisecond + f.dur/5
		at := max(0, min(f.after, recChaos-time.Duration(p.nodes)*gap-time.Second))
		for i := range p.nodes {
			out = append(out, recFault{after: at + time.Duration(i)*gap, kind: nodeDeploy, node: i, n: rollouts})
		}
		rollouts++
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].after < out[j].after })
	p.faults = out
	return p
}

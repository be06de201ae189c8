package sim

import (
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// apply carries out one planned event of a node schedule.
func (w *NodeWorld) apply(f recFault, now time.Time) {
	w.rec.Add("world", "event %s node=%d dur=%v n=%d", f.kind, f.node, f.dur, f.n)
	if w.applyServers(f) {
		return
	}
	name := w.slots[f.node].name
	switch f.kind {
	case RecFaultCrash:
		if f.n%3 == 0 { // the reconciler leader's process: its term and the queues it owns end together
			if slot, ok := w.slotNamed(w.model.Oldest(recCandidates())); ok {
				w.crash(slot)
				break
			}
		}
		w.crash(f.node)
	case recRestart:
		w.restart(f.node, w.newNode)
	case RecFaultFleet:
		for slot := range w.slots {
			w.crash(slot)
		}
	case recFleetRestart:
		for slot := range w.slots {
			w.restart(slot, w.newNode)
		}
	case RecFaultPause:
		w.net.Hold(name, now.Add(electionTTL+f.dur))
	case RecFaultPartition:
		w.net.Cut(name, true)
	case recPartitionEnd:
		w.net.Cut(name, false)
	case NodeFaultStop:
		w.stopGracefully(f.node)
	case nodeDeploy:
		w.deploy(f)
	case NodeFaultDrain, nodeUndrain:
		w.setDrained(f.node, f.kind == NodeFaultDrain)
	}
}

// slotNamed is the slot of the live process whose candidate key kv is.
func (w *NodeWorld) slotNamed(kv *mvccpb.KeyValue) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for slot, n := range w.slots {
		if kv != nil && string(kv.Value) == n.name && !n.crashed {
			return slot, true
		}
	}
	return 0, false
}

// heal turns every fault off, restarts every process that is down and undrains every live one.
func (w *NodeWorld) heal() {
	w.healServers()
	for slot, n := range w.slots {
		w.net.Cut(n.name, false)
		w.net.Hold(n.name, time.Time{})
		w.mu.Lock()
		drained := w.draining[slot] == n.name
		w.mu.Unlock()
		if drained {
			w.setDrained(slot, false)
		}
		w.restart(slot, w.newNode)
	}
}

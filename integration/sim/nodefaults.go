package sim

import "time"

// apply carries out one planned event of a node schedule: the reconciler world's faults of the
// servers and of the processes, and the node world's own.
func (w *NodeWorld) apply(f recFault, now time.Time) {
	w.rec.Add("world", "event %s node=%d dur=%v n=%d", f.kind, f.node, f.dur, f.n)
	if w.applyServers(f) || w.applyProcs(w, f, now) {
		return
	}
	switch f.kind {
	case NodeFaultStop:
		w.stopGracefully(f.node)
	case nodeDeploy:
		w.deploy(f)
	case NodeFaultDrain, nodeUndrain:
		w.setDrained(f.node, f.kind == NodeFaultDrain)
	}
}

func (w *NodeWorld) restartSlot(slot int) { w.restart(slot, w.newNode) }

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

package sim

import (
	"context"
	"time"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
)

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
	case NodeFaultTransfer:
		w.transfer(w.queues[f.n], w.procName(f.node))
	}
}

// transfer asks, as an operator's `baton transfer`, that queue's leader hand it over to the process
// named to. The request goes through the network like any etcd request (from its own client), so
// it is sent in the background; an unanswered one goes with its lease.
func (w *NodeWorld) transfer(queue, to string) {
	w.cmu.Lock()
	w.requested[queue] = to
	w.cmu.Unlock()
	w.bg.Go(func() {
		keys := balance.Keys{ElectionPrefix: election.DefaultConfig().Prefix}
		ctx, cancel := context.WithTimeout(w.ctx, 10*time.Second)
		defer cancel()
		if _, err := balance.RequestTransfer(ctx, w.operator, keys, Project, queue, balance.TransferRequest{To: to}, nodeTransferTTL); err != nil {
			w.note("operator", "transfer of %s to %s not requested: %v", queue, to, err)
		}
	})
}

// nodeTransferTTL is how long a transfer request stands (the lease `baton transfer` gives it).
const nodeTransferTTL = 10 * time.Second

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

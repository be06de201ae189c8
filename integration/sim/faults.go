package sim

import (
	"time"
)

// apply injects one fault (or ends one).
func (w *World) apply(f faultEvent, now time.Time) {
	w.rec.Add("world", "fault %s node=%d dur=%v n=%d", f.kind, f.node, f.dur, f.n)
	n := w.slots[f.node]
	switch f.kind {
	case FaultCrash:
		w.crash(f.node)
	case "restart":
		w.restart(f.node, w.newNode)
	case FaultStop:
		w.stop(f, now)
	case FaultPartition:
		w.net.Cut(n.name, true)
	case FaultPartition + "-end":
		w.net.Cut(n.name, false)
	case FaultStall:
		w.net.Hold(n.name, now.Add(electionTTL+f.dur))
	case FaultRevoke:
		w.revokeLeader(f.n)
	case FaultNoLeader:
		if len(w.acting(now)) > 0 {
			w.probe("no-leader window while a leader acted")
		}
		w.model.SetLeader(false)
	case FaultNoLeader + "-end":
		w.model.SetLeader(true)
	case FaultLeaderChange:
		w.model.LeaderChange()
	case FaultCompact:
		w.model.Compact(int64(f.n))
	case faultSnapshot:
		w.takeSnapshot(f.n)
	case FaultRestore, FaultRestoreBump:
		if w.restore(f.n, f.kind == FaultRestoreBump) {
			w.restored()
		}
	}
}

// restored marks every running term whose key the restore took away as ended from outside: like
// an operator's revoke, a restore can let a successor win before the old leader hears of it (its
// next Guard or Confirm; its key's watch, resumed past the revisions the restore reused, may never
// tell it). Fencing must keep that harmless: its writes are refused, and it is never counted as an
// owner, since etcd no longer holds its key.
func (w *World) restored() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.nodes {
		for _, ts := range n.terms {
			if !ts.running {
				continue
			}
			if kv := w.model.Get(ts.term.Key()); kv == nil || kv.CreateRevision != ts.term.Token() {
				ts.external = true
			}
		}
	}
}

// revokeLeader is an operator revoking the lease of the leader of the i-th queue (mod the count).
func (w *World) revokeLeader(i int) {
	q := w.queues[i%len(w.queues)]
	w.mu.Lock()
	var lease int64
	for _, n := range w.nodes {
		ts := n.terms[q]
		if ts == nil || !ts.running || n.crashed {
			continue
		}
		if kv := w.model.Get(ts.term.Key()); kv != nil && kv.CreateRevision == ts.term.Token() {
			lease = kv.Lease
		}
	}
	if lease != 0 {
		for _, n := range w.nodes {
			for _, ts := range n.terms {
				if kv := w.model.Get(ts.term.Key()); kv != nil && kv.Lease == lease {
					ts.external = true
				}
			}
		}
	}
	w.mu.Unlock()
	if lease != 0 && w.model.Revoke(lease) {
		w.probe("operator revoked a leader's lease")
	}
}

// heal turns every fault off and restarts every crashed process.
func (w *World) heal(now time.Time) {
	w.rec.Add("world", "heal")
	w.net.SetFaults(NetFaults{Detect: w.plan.net.Detect})
	w.model.SetLeader(true)
	for slot, n := range w.slots {
		w.net.Cut(n.name, false)
		w.net.Hold(n.name, time.Time{})
		w.restart(slot, w.newNode)
	}
}

// stop is a graceful stop (FaultStop). In half of them the stopping process loses etcd while it
// drains: everything to and from it is held until just after its session's validity ends (within
// half the safety margin), so that the session is lost during the drain and etcd answers again
// while the callbacks that take their whole drain still run.
func (w *World) stop(f faultEvent, now time.Time) {
	w.mu.Lock()
	old := w.slots[f.node]
	el, crashed := old.el, old.crashed
	w.mu.Unlock()
	until, live := time.Time{}, false
	if el != nil && !crashed {
		until, live = el.SessionValidUntil()
	}
	w.deploy(f.node, w.newNode)
	if live && f.n%2 == 0 {
		w.net.Hold(old.name, until.Add(f.dur%(w.margin/2)))
	}
}

package sim

// apply runs one planned event of the chaos phase.
func (w *BalanceWorld) apply(f faultEvent) {
	w.rec.Add("world", "%s p%d", f.kind, f.node)
	switch f.kind {
	case BalanceDrain, BalanceUndrain:
		w.setDraining(f.node, f.kind == BalanceDrain)
	case BalanceCrash:
		w.crash(f.node)
	case BalanceRestart:
		w.restart(f.node, w.newNode)
	case BalanceDeploy:
		w.deploy(f.node)
	case faultSnapshot:
		w.takeSnapshot(f.n)
	case FaultRestore, FaultRestoreBump:
		w.restore(f.n, f.kind == FaultRestoreBump)
	}
}

func (w *BalanceWorld) setDraining(slot int, draining bool) {
	w.mu.Lock()
	n := w.slots[slot]
	if n.crashed || n.runner == nil {
		w.mu.Unlock()
		return
	}
	n.draining = draining
	w.mu.Unlock()
	n.runner.SetDraining(draining)
}

// deploy is one step of a rolling deploy (fleet.deploy), whose next incarnations start at v2.
func (w *BalanceWorld) deploy(slot int) {
	w.mu.Lock()
	w.version = "v2"
	w.mu.Unlock()
	w.fleet.deploy(slot, w.newNode)
}

// heal turns the network's faults off, restarts every crashed process, undrains every process and
// drains the one the plan names.
func (w *BalanceWorld) heal() {
	w.rec.Add("world", "heal")
	w.net.SetFaults(NetFaults{Detect: w.plan.net.Detect})
	for slot := range w.slots {
		w.restart(slot, w.newNode)
		w.setDraining(slot, slot == w.plan.drainAtHeal)
	}
}

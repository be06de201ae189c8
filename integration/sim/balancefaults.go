package sim

import "sync"

// apply runs one planned event of the chaos phase.
func (w *BalanceWorld) apply(f faultEvent) {
	w.rec.Add("world", "%s p%d", f.kind, f.node)
	switch f.kind {
	case BalanceDrain, BalanceUndrain:
		w.setDraining(f.node, f.kind == BalanceDrain)
	case BalanceCrash:
		w.crash(f.node)
	case BalanceRestart:
		w.restart(f.node)
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

func (w *BalanceWorld) crash(slot int) {
	w.mu.Lock()
	n := w.slots[slot]
	if n.crashed {
		w.mu.Unlock()
		return
	}
	n.crashed = true
	w.mu.Unlock()
	w.net.Cut(n.name, true)
	w.bg.Go(n.stop)
}

// restart starts a new incarnation (a new server ID) of a crashed process: a worker joining.
func (w *BalanceWorld) restart(slot int) {
	w.mu.Lock()
	old := w.slots[slot]
	if !old.crashed {
		w.mu.Unlock()
		return
	}
	gen := 0
	for _, n := range w.nodes {
		if n.slot == slot {
			gen++
		}
	}
	w.mu.Unlock()
	n := w.newNode(slot, gen)
	w.mu.Lock()
	w.slots[slot] = n
	w.mu.Unlock()
	n.start()
}

// heal turns the network's faults off, restarts every crashed process, undrains every process and
// drains the one the plan names.
func (w *BalanceWorld) heal() {
	w.rec.Add("world", "heal")
	w.net.SetFaults(NetFaults{Detect: w.plan.net.Detect})
	for slot := range w.slots {
		w.restart(slot)
		w.setDraining(slot, slot == w.plan.drainAtHeal)
	}
}

// stopAll stops every live process gracefully and waits for every stop.
func (w *BalanceWorld) stopAll() {
	var wg sync.WaitGroup
	w.mu.Lock()
	for _, n := range w.slots {
		if !n.crashed {
			n.crashed = true
			wg.Go(n.stop)
		}
	}
	w.mu.Unlock()
	wg.Wait()
	w.bg.Wait()
}

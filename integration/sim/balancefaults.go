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
	case BalanceDeploy:
		w.deploy(f.node)
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
	w.mu.Unlock()
	n := w.newNode(slot, w.generation(slot))
	w.mu.Lock()
	w.slots[slot] = n
	w.mu.Unlock()
	n.start()
}

// deploy is one step of a rolling deploy (surge): the process's next incarnation starts at v2, and its
// current one, still checked while it hands its queues over, stops gracefully. A crashed process
// just comes back at v2.
func (w *BalanceWorld) deploy(slot int) {
	w.mu.Lock()
	w.version = "v2"
	old := w.slots[slot]
	w.mu.Unlock()
	if old.crashed {
		w.restart(slot)
		return
	}
	n := w.newNode(slot, w.generation(slot))
	w.mu.Lock()
	w.slots[slot] = n
	w.mu.Unlock()
	n.start()
	w.bg.Go(old.stop)
}

// generation is the next incarnation's number of a process.
func (w *BalanceWorld) generation(slot int) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	gen := 0
	for _, n := range w.nodes {
		if n.slot == slot {
			gen++
		}
	}
	return gen
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

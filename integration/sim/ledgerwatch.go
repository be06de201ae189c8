package sim

import (
	"maps"
	"slices"
	"time"

	"github.com/baton-run/baton/ledger"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ProbeLedgerWatchCompletion is hit when the ledger's Watch, the one replay of the ledger that tools
// judge it by, reported a completion.
const ProbeLedgerWatchCompletion = "ledger watch saw a completion"

// watchLedger follows the project's ledger with the real ledger.Watch through its own faulty client
// for the whole schedule, then holds what it saw to what the model committed: every completion it
// reports is a done record the model committed at that revision with that value (a replay that
// invents or misplaces a completion would make `baton verify` judge the ledger wrongly). The model
// sends no progress notifications, so the watch is not asked to have seen everything (WaitFor).
func (w *LedgerWorld) watchLedger() {
	ctx := w.ctx
	cli := w.model.NewClient(ctx, "watch")
	w.mu.Lock()
	w.watchCli = cli
	w.mu.Unlock()
	var wt *ledger.Watch
	for {
		var err error
		if wt, err = ledger.NewWatch(ctx, cli, ledgerPrefix, Project); err == nil {
			break
		}
		t := time.NewTimer(100 * time.Millisecond) // the bubble's clock: fake time
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
	wt.SetClock(newNodeClock(w.s, "clock/watch"))
	wt.Run(ctx)
	completions, _ := wt.Seen()
	var wrong []string
	w.rmu.Lock()
	for _, k := range slices.Sorted(maps.Keys(completions)) { // in a fixed order: the trace is hashed
		for _, c := range completions[k] {
			w.probes[ProbeLedgerWatchCompletion]++
			if !slices.Contains(w.doneAt[c.Rev], c.Record) {
				wrong = append(wrong, "ledger watch reported a completion of "+k+" ("+c.Record+") that the model did not commit at its revision")
			}
		}
	}
	w.rmu.Unlock()
	for _, v := range wrong {
		w.violate("%s", v) // recorded in the timeline too
	}
}

// closeClients closes the owners' and the watch's clients once every goroutine using them stopped.
func (w *LedgerWorld) closeClients() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range append([]*clientv3.Client{w.watchCli}, w.ownerClients()...) {
		if c != nil {
			c.Close()
		}
	}
}

func (w *LedgerWorld) ownerClients() []*clientv3.Client {
	var out []*clientv3.Client
	for _, o := range w.owners {
		out = append(out, o.cli)
	}
	return out
}

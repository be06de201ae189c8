package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// Begin is the in-memory ledger's: done once Complete recorded the key.
func (w *RunWorld) Begin(_ context.Context, key string, _ takeover.Owner) (bool, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ledger[key], nil
}

// Complete records key done.
func (w *RunWorld) Complete(_ context.Context, key string, _ takeover.Owner) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ledger[key] = true
	return nil
}

var _ dispatcher.Ledger = (*RunWorld)(nil)

// handle is the application's handler: it counts the runs of each key.
func (w *RunWorld) handle(_ context.Context, key string, r dispatcher.Request, _ takeover.Owner) error {
	w.mu.Lock()
	w.handled[key]++
	n := w.handled[key]
	w.mu.Unlock()
	w.rec.Add("run", "handled %s", r.TaskID)
	if n > 1 {
		w.violate("request %s handled %d times", r.TaskID, n)
	}
	return nil
}

// pageInFlight reports whether a Backlog page was asked for and has not been read yet.
func (w *RunWorld) pageInFlight() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inFlight
}

// missing lists the keys of want not handled yet.
func (w *RunWorld) missing(want map[string]bool) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for k := range want {
		if w.handled[k] == 0 {
			out = append(out, k[:8])
		}
	}
	slices.Sort(out)
	return out
}

// checkProgress is the storm's oracle: the prior run's requests are handled within runProgressBound.
func (w *RunWorld) checkProgress() {
	if m := w.missing(w.carried); len(m) > 0 {
		w.violate("%d of %d requests read back from the prior run still unhandled %v into the chain, arrivals going on: %s",
			len(m), len(w.carried), runProgressBound, strings.Join(m, " "))
	}
}

// check is the oracle after the heal: every request, carried or signalled, was handled.
func (w *RunWorld) check(end time.Time) {
	all := map[string]bool{}
	for k := range w.carried {
		all[k] = true
	}
	w.mu.Lock()
	for k := range w.sent {
		all[k] = true
	}
	w.mu.Unlock()
	if m := w.missing(all); len(m) > 0 {
		w.violate("%d of %d requests unhandled %v after the storm (at %v): %s", len(m), len(all), runHealBound,
			end.Sub(w.start), strings.Join(m, " "))
	}
}

// keyDraw is a number drawn from the seed and a dispatch key: the same whichever order the
// activities of an instant run in.
func keyDraw(seed uint64, key string) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%x/%s", seed, key)
	return h.Sum64()
}

// dispatchBegun records a DispatchBatch activity's first attempt (in the mirror too); none may
// begin in a run after its quiesce returned.
func (w *RunWorld) dispatchBegun(b dispatcher.Batch) {
	id := w.mirrorScheduled(dispatcher.ActivityDispatchBatch, b)
	w.mu.Lock()
	w.dispatches++
	w.scheduled[b.Items[0].Key] = id
	quiesced, run := w.quiescedNow(), w.runNo
	w.mu.Unlock()
	if quiesced {
		w.violate("run %d started a dispatch of %s after its quiesce returned", run, b.Items[0].Request.TaskID)
	}
}

// dispatchEnded records a DispatchBatch activity's return (in the mirror too, when it succeeded).
func (w *RunWorld) dispatchEnded(b dispatcher.Batch, res dispatcher.BatchResult, err error) {
	w.mu.Lock()
	w.dispatches--
	id := w.scheduled[b.Items[0].Key]
	delete(w.scheduled, b.Items[0].Key)
	w.mu.Unlock()
	if err == nil {
		w.mirrorCompleted(id, res)
	}
}

// checkUpdates is the senders' oracle after the heal: every update sent was answered.
func (w *RunWorld) checkUpdates() {
	w.mu.Lock()
	var unanswered []string
	for k, u := range w.updates {
		if u.sent && !u.answered {
			unanswered = append(unanswered, k[:8])
		}
	}
	w.mu.Unlock()
	slices.Sort(unanswered)
	if len(unanswered) > 0 {
		w.violate("%d updates never answered: %s", len(unanswered), strings.Join(unanswered, " "))
	}
}

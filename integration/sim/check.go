package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/baton-run/baton/election"
)

// elected records a term's start and checks that no other live process's callback for the queue
// still runs (its lease must not have gone before its callback returned), unless an operator removed
// that lease.
func (w *World) elected(n *node, q string, t *election.Term) {
	w.rec.Add(n.name, "elected %s token=%d", q, t.Token())
	w.mu.Lock()
	var overlap []string
	for _, o := range w.nodes {
		if o == n || o.crashed {
			continue
		}
		if ts := o.terms[q]; ts != nil && ts.running && !ts.external {
			overlap = append(overlap, fmt.Sprintf("%s(token=%d)", o.name, ts.term.Token()))
		}
	}
	n.terms[q] = &termState{term: t, running: true}
	w.mu.Unlock()
	if len(overlap) > 0 {
		w.violate("%s elected for %s (token=%d) while the callback of %s still runs", n.name, q, t.Token(), strings.Join(overlap, ","))
	}
}

func (w *World) returned(n *node, q string, t *election.Term) {
	w.rec.Add(n.name, "callback returned %s token=%d", q, t.Token())
	w.mu.Lock()
	defer w.mu.Unlock()
	if ts := n.terms[q]; ts != nil && ts.term == t {
		ts.running = false
	}
}

// heldTerm is a live process's term for a queue, as acting sees it.
type heldTerm struct {
	n *node
	q string
	t *election.Term
}

// acting lists, per queue, the live processes whose term passes Check and whose key etcd holds with
// the term's token, and checks fail-closed for each: the term's local deadline is no later than the
// server's expiry of its lease. It runs at every step, so it reuses its lists, skips crashed processes
// whole, and asks a term's cheap Err before Check (most terms seen here have ended, and Check would
// build an error for each only to throw it away).
func (w *World) acting(now time.Time) map[string][]string {
	w.mu.Lock()
	hs := w.held[:0]
	for _, n := range w.nodes {
		if n.crashed {
			continue
		}
		for q, ts := range n.terms {
			if ts.term.Err() == nil {
				hs = append(hs, heldTerm{n, q, ts.term})
			}
		}
	}
	w.held = hs
	w.mu.Unlock()
	if w.owners == nil {
		w.owners = make(map[string][]string, len(w.queues))
	}
	out := w.owners
	clear(out) // no empty entries: a caller may ask len(acting) whether anybody acts
	for _, h := range hs {
		if h.t.Check() != nil {
			continue
		}
		kv := w.model.Get(h.t.Key())
		if kv == nil || kv.CreateRevision != h.t.Token() {
			continue
		}
		out[h.q] = append(out[h.q], h.n.name)
		if exp, ok := w.model.LeaseExpiry(kv.Lease); ok && exp.Before(h.t.ValidUntil().Add(w.margin)) {
			w.violate("%s acts for %s (token=%d) with a local deadline %v after etcd's expiry of its lease", h.n.name, h.q,
				h.t.Token(), h.t.ValidUntil().Add(w.margin).Sub(exp))
		}
	}
	return out
}

// check runs the invariants of one step; after the heal it also watches for liveness.
func (w *World) check(now time.Time, healing bool) {
	act := w.acting(now)
	for q, names := range act {
		if len(names) > 1 {
			w.violate("%d owners of %s at once: %s", len(names), q, strings.Join(names, ","))
		}
	}
	if !healing || !w.healedAt.IsZero() {
		return
	}
	for _, q := range w.queues {
		if len(act[q]) != 1 {
			return
		}
	}
	w.healedAt = now
	w.rec.Add("world", "live: every queue has one leader")
}

// endLiveness reports the queues without a leader when the heal deadline came.
func (w *World) endLiveness(now time.Time) {
	if !w.healedAt.IsZero() {
		return
	}
	act := w.acting(now)
	for _, q := range w.queues {
		if len(act[q]) != 1 {
			w.violate("liveness: %s has %d leaders %v after the heal deadline", q, len(act[q]), act[q])
		}
	}
}

package sim

import (
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
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
	w.model.Inspect(func(v etcdmodel.View) {
		for _, h := range hs {
			if h.t.Check() != nil {
				continue
			}
			kv := holds(v, h.t)
			if kv == nil {
				continue
			}
			out[h.q] = append(out[h.q], h.n.name)
			// The local deadline; on a skewed clock, the term's end in real time (skew.go: the margin
			// is what absorbs a slow clock).
			limit := h.t.ValidUntil().Add(w.margin)
			if h.n.clk.skewed() {
				limit = h.n.clk.toReal(h.t.ValidUntil())
			}
			if exp, ok := v.LeaseExpiry(kv.Lease); ok && exp.Before(limit) {
				w.violate("%s acts for %s (token=%d) with a local deadline %v after etcd's expiry of its lease", h.n.name, h.q,
					h.t.Token(), limit.Sub(exp))
			}
		}
	})
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
			w.violate("liveness: %s has %d leaders %v after the heal deadline; its candidates: %s", q, len(act[q]), act[q], w.candidatesOf(q, w.start, w.termOf(q)))
		}
	}
}

// holds returns t's key when etcd (v) holds it at t's token and it is its election's oldest
// candidate, so that t's process may act; nil otherwise.
func holds(v etcdmodel.View, t *election.Term) *mvccpb.KeyValue {
	kv := v.Get(t.Key())
	if kv == nil || kv.CreateRevision != t.Token() {
		return nil
	}
	if o := v.Oldest(election.CandidatePrefix(t.Key())); o == nil || o.CreateRevision != t.Token() {
		return nil
	}
	return kv
}

// candidatesOf describes the candidate keys of q's election in the model: key, create revision,
// value, lease, the lease's expiry after start (or "gone") and what term(value) says of its process.
func (g *stage) candidatesOf(q string, start time.Time, term func(server string) string) string {
	var out []string
	for _, kv := range g.model.Prefix(queueCandidates(q)) {
		exp := "gone"
		if at, ok := g.model.LeaseExpiry(kv.Lease); ok {
			exp = at.Sub(start).String()
		}
		out = append(out, fmt.Sprintf("%s@%d(%s, lease %x expires %s, %s)", kv.Key, kv.CreateRevision, kv.Value, kv.Lease, exp, term(string(kv.Value))))
	}
	return strings.Join(out, " ")
}

// termOf says what the world knows of server's term of q.
func (w *World) termOf(q string) func(string) string {
	return func(server string) string {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, n := range w.nodes {
			if ts := n.terms[q]; n.name == server && ts != nil {
				return fmt.Sprintf("term token=%d running=%v err=%v", ts.term.Token(), ts.running, ts.term.Err())
			}
		}
		return "no term"
	}
}

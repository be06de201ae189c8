package sim_test

import "github.com/baton-run/baton/heartbeat"

// observe compares the stored entry with the last one seen. It runs before every command the Redis
// model executes and at every step, so it sees (almost) every write: two writes between
// observations are seen as one. The invariants: the entry's token never goes down, except when
// etcd's current holder, of a later history than the entry's writer, wrote it (the sanctioned
// regression path); a superseded owner's write never lands over a newer owner's entry (a lower
// token over a higher one, which the first rule covers); the entry always decodes.
func (w *hbWorld) observe() {
	w.mu.Lock()
	defer w.mu.Unlock()
	e, err := w.readEntry()
	if err != nil {
		w.violateLocked("the heartbeat entry does not decode: %v", err)
		return
	}
	if e == nil {
		w.last = nil
		return
	}
	if l := w.last; l != nil && l.Token == e.Token && l.UpdatedMs == e.UpdatedMs && l.ServerID == e.ServerID {
		return
	}
	writer := w.terms[e.ServerID]
	if writer == nil {
		w.violateLocked("entry written by %s, which no term of this world is", e.ServerID)
		return
	}
	if l := w.last; l != nil && e.Token < l.Token {
		prev := w.terms[l.ServerID]
		if writer == w.current && prev != nil && writer.epoch > prev.epoch {
			w.probes[probeHBRegression]++
			w.noteLocked("regression: %s (token=%d) replaced token=%d of %s, confirmed by etcd", e.ServerID, e.Token, l.Token, l.ServerID)
		} else {
			w.violateLocked("entry token went down from %d (%s) to %d (%s) while etcd holds %s", l.Token, l.ServerID, e.Token,
				e.ServerID, w.currentIDLocked())
		}
	}
	if writer != w.current {
		w.noteLocked("a write of %s (token=%d), not etcd's holder %s, landed over %s", e.ServerID, e.Token, w.currentIDLocked(), lastID(w.last))
	}
	if w.flushed && writer == w.current {
		w.flushed = false
		w.probes[probeHBFlush]++
		w.noteLocked("recovered from the flush: %s (token=%d) wrote again", e.ServerID, e.Token)
	}
	w.last = e
}

func (w *hbWorld) currentIDLocked() string {
	if w.current == nil {
		return "no term"
	}
	return w.current.id
}

func lastID(e *heartbeat.Entry) string {
	if e == nil {
		return "an empty key"
	}
	return e.ServerID
}

// checkLive requires, from hbLiveBound after the heal on, that the entry is the current owner's:
// written within the bound, and never replaced or lost afterwards (no flapping).
func (w *hbWorld) checkLive() {
	w.mu.Lock()
	defer w.mu.Unlock()
	cur := w.current
	if w.liveFailed {
		return
	}
	w.liveFailed = true
	switch {
	case cur == nil:
		w.violateLocked("liveness: no term holds the queue after the heal")
	case w.last == nil:
		w.violateLocked("liveness: no heartbeat entry %v after the heal; etcd holds %s (token=%d)", hbLiveBound, cur.id, cur.token)
	case w.last.ServerID != cur.id:
		w.violateLocked("liveness: the entry is %s's (token=%d) %v after the heal; etcd holds %s (token=%d)", w.last.ServerID,
			w.last.Token, hbLiveBound, cur.id, cur.token)
	default:
		w.liveFailed = false
	}
}

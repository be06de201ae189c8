package balance

import (
	"maps"
	"math"
	"time"
)

// A queue nobody stands for (vacant) must get a leader, but not by every worker at once. When a
// fleet starts together, or when a worker dies and its queues fall vacant together, every worker
// standing for every vacant queue would put workers × queues candidate keys into etcd (100,000 at
// 10,000 queues on 10 workers), each with a watch of its own, and the balancer would then move
// queues for seconds to spread what the first keys won.
//
// So each vacant queue has an order among the live workers, by rendezvous hashing of (queue, server
// ID): the first-ranked worker stands at once, the second after VacantWait, the others after twice
// that. The ranks spread the vacant queues evenly, and every worker computes the same order from the
// member records (roster.go), so a fleet's start or a worker's death costs about one candidacy per
// queue. The wait is the fallback that keeps the "always an owner" promise: when the first-ranked worker is gone
// before its record, does not serve the queue, or is too slow, the others stand all the same.
//
// Ranked: member records that do not drain, of the newest version during a rollout (a vacant queue
// goes forward), less the workers whose candidate keys all went (gone, in the view: a worker cut off
// loses every key at once, when its lease expires, while its member record, on a lease of its own,
// may live a little longer). A starting worker waits Settle before it stands for any vacant queue,
// so that it ranks among the records of the workers starting with it, not among the first few.

// rank is the rendezvous weight of id for queue: FNV-1a over both, then a 64-bit finalizer
// (splitmix64) so that names differing in the last byte spread over the whole range.
func rank(queue, id string) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := range len(queue) {
		h = (h ^ uint64(queue[i])) * prime
	}
	h = (h ^ 0xff) * prime // a separator no name contains
	for i := range len(id) {
		h = (h ^ uint64(id[i])) * prime
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

// rankOf returns how many ranked workers rank above this one for the vacant queue (0: it ranks
// first); a worker that does not rank itself (ranks) ranks last.
func (r *Runner) rankOf(queue string) int {
	on, newest := r.roster.rollout()
	if !ranks(member{Version: r.cfg.Version, Draining: r.roster.draining()}, on, newest) {
		return math.MaxInt
	}
	var others []string
	r.roster.eachMember(func(id string, m member) {
		if id != r.cfg.ServerID && ranks(m, on, newest) && !r.view.isGone(id) {
			others = append(others, id)
		}
	})
	return rankAmong(queue, r.cfg.ServerID, others)
}

// ranksFirst reports whether this worker ranks first for the vacant queue among the ranked workers.
func (r *Runner) ranksFirst(queue string) bool { return r.rankOf(queue) == 0 }

// vacantWait returns how long this worker still waits before it stands for the vacant queue
// (vacancyWait).
func (r *Runner) vacantWait(queue string) time.Duration {
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	return vacancyWait(vacancyFacts{now: r.cfg.Clock.Now(), started: started, vacantSince: r.view.vacantSince(queue),
		rank: r.rankOf(queue), settle: r.cfg.Settle, vacantWait: r.cfg.VacantWait})
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// vacantSince returns since when queue has had no candidate as far as this view knows: when its last
// key went, or when the view last read every key.
func (v *view) vacantSince(queue string) time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maxTime(v.deleted[queue], v.loadedAt)
}

// isGone reports whether id stood for some of this worker's queues and stands for none any more
// (remembered for goneFor).
func (v *view) isGone(id string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	at, ok := v.gone[id]
	return ok && (v.goneFor == 0 || v.clk.Now().Sub(at) < v.goneFor)
}

// markGoneLocked records that id stands nowhere any more, and forgets IDs gone for longer than
// goneFor, so that the workers of a long life of rolling restarts do not pile up; the caller holds mu.
func (v *view) markGoneLocked(id string) {
	now := v.clk.Now()
	if v.goneFor > 0 {
		maps.DeleteFunc(v.gone, func(_ string, at time.Time) bool { return now.Sub(at) >= v.goneFor })
	}
	v.gone[id] = now
}

// eachMember calls f with every member record. f must not call into the roster.
func (r *roster) eachMember(f func(id string, m member)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, m := range r.members {
		f(id, m)
	}
}

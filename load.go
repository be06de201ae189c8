package baton

import "github.com/baton-run/baton/registry"

// WorkerLoad is what the application reports of its own work on one queue (Config.Load): the
// registry shows it beside the worker, so that operators and schedulers see the load, not only the
// liveness, of each worker.
type WorkerLoad struct {
	// Active is the number of tasks running now.
	Active int `json:"active"`
	// Completed and Failed are the tasks completed and failed since the process started: running
	// totals, so that the application keeps plain counters; the Node sends the registry the increase
	// since its last heartbeat.
	Completed int64 `json:"completed"`
	Failed    int64 `json:"failed"`
}

// loadReporter turns the application's running totals into the registry's per-heartbeat deltas.
// Only registerLoop uses it, so it needs no lock.
type loadReporter struct {
	load func(queue string) WorkerLoad
	sent map[string]WorkerLoad // per queue, the totals of the last heartbeat the registry took
}

// beat returns the heartbeat for queue and the load it reports. A total that went down (the
// application reset its counter) counts from zero.
func (r *loadReporter) beat(queue string) (registry.Beat, WorkerLoad) {
	if r.load == nil {
		return registry.Beat{}, WorkerLoad{}
	}
	now := r.load(queue)
	prev := r.sent[queue]
	delta := func(now, prev int64) int {
		if now < prev {
			prev = 0
		}
		// Out of range (a negative figure, or billions in one interval) the registry refuses the
		// heartbeat with the field and the rule, and the worker's status shows that error.
		return int(now - prev)
	}
	return registry.Beat{
		Active:         now.Active,
		CompletedDelta: delta(now.Completed, prev.Completed),
		FailedDelta:    delta(now.Failed, prev.Failed),
	}, now
}

// taken records that the registry took the heartbeat of queue that reported load.
func (r *loadReporter) taken(queue string, load WorkerLoad) {
	if r.load == nil {
		return
	}
	if r.sent == nil {
		r.sent = map[string]WorkerLoad{}
	}
	r.sent[queue] = load
}

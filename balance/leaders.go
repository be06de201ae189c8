package balance

import (
	"context"

	"github.com/baton-run/baton/election"
)

// Each queue's Callbacks.OnNewLeader is served from the view, the Runner's one watch on the project's
// election keys, and election.Run gets none: Run would Observe the queue, which costs a watch of its
// own, two goroutines, and a read and a new watch at every change of the queue's candidates. At
// 10,000 queues on 10 workers, every key that stepped into a queue's line cost ten reads and ten
// watch registrations, all queued on the client's one watch stream. Without balancing (Disabled)
// there is no view, and Run observes each queue as before.

// leaderLocked returns the queue's leader as election.Observe reports it: the oldest candidate key,
// the one etcd lets lead; zero when nobody stands. The caller holds mu.
func (v *view) leaderLocked(queue string) election.Leader {
	var best election.Leader
	for key, c := range v.cands[queue] {
		if best.ID == "" || c.rev < best.Token {
			best = election.Leader{ID: c.id, Token: c.rev, Key: key}
		}
	}
	return best
}

// deliverLeaders calls notify[queue] with every change of the queue's leader, starting with the
// leader the first read found (zero when nobody stands), until ctx ends. One goroutine makes every
// call, so a queue's calls come in order; changes that come faster than the calls are delivered as
// the latest, as Observe does.
func (v *view) deliverLeaders(ctx context.Context, notify map[string]func(election.Leader)) {
	sent := make(map[string]election.Leader, len(notify))
	for {
		select {
		case <-v.newLeaders.due:
		case <-ctx.Done():
			return
		}
		v.mu.Lock()
		qs, all := v.newLeaders.take()
		if all {
			qs = v.queues
		}
		due := make(map[string]election.Leader, len(qs))
		for q := range qs {
			if notify[q] != nil {
				due[q] = v.leaderLocked(q)
			}
		}
		v.mu.Unlock()
		for q, l := range due {
			if last, ok := sent[q]; ok && last == l {
				continue
			}
			sent[q] = l
			notify[q](l)
		}
	}
}

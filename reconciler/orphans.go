package reconciler

import (
	"context"
	"errors"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/takeover"
)

// vacancies is what the event-driven cleanup needs of the queues' Elector: the queues whose last
// candidate key went. *election.Elector has it; a Leaders without it leaves the cleanup to the cycle.
type vacancies interface {
	WatchVacated(ctx context.Context, project string) (<-chan election.Vacated, error)
}

var _ vacancies = (*election.Elector)(nil)

// vacancy is a vacated queue and when it is due for a look.
type vacancy struct {
	v  election.Vacated
	at time.Time
}

// watchOrphans runs while this process leads the reconciler election: when a queue's last candidate
// key goes (its owner crashed and its lease expired, with nobody else standing) and the queue is
// still without a candidate OrphanGrace later, it cleans up what the owner left, the run named by
// the queue's heartbeat entry and the entry, through the cycle's own fenced, run-scoped path (clean).
// A handover vacates nothing (the successor stands in line), and a queue that anyone stands for
// again within the grace (a re-campaign, the vacant-queue rule) is left alone; the one-minute cycle
// and the Temporal-side sweep remain the backstop.
//
// The watch starts with the term, so it cannot see a queue vacated before (the whole fleet crashed,
// and the worker that came back first does not serve that queue). So the term's first cycle sends
// the project's live heartbeat entries on atStart, and each whose queue has no leader, in one read
// (Leaders), counts as vacated at the term's start: it is cleaned OrphanGrace later, not a cycle
// later.
func (r *Reconciler) watchOrphans(ctx context.Context, term Term, atStart <-chan []heartbeat.Entry) {
	w, ok := r.leaders.(vacancies)
	if !ok || r.cfg.OrphanGrace < 0 {
		return
	}
	vacated, err := w.WatchVacated(ctx, r.cfg.Project)
	if err != nil {
		r.log.Warn("no event-driven cleanup of orphaned dispatchers; the cycle alone cleans up", zap.Error(err))
		return
	}
	started := r.cfg.Clock.Now()
	var pending []vacancy // in order of due time: the grace is the same for all
	// Armed only while something is pending; an early fire is harmless: only what is due is looked at.
	timer := r.cfg.Clock.NewTimer(r.cfg.OrphanGrace)
	timer.Stop()
	defer timer.Stop()
	for {
		var due <-chan time.Time
		if len(pending) > 0 {
			timer.Reset(max(0, pending[0].at.Sub(r.cfg.Clock.Now())))
			due = timer.C()
		}
		select {
		case v, ok := <-vacated:
			if !ok {
				return
			}
			pending = append(pending, vacancy{v: v, at: r.cfg.Clock.Now().Add(r.cfg.OrphanGrace)})
		case live := <-atStart:
			atStart = nil
			for _, v := range r.vacantAtStart(ctx, live) {
				// Vacated at the term's start at the latest: due OrphanGrace after it. Due times stay
				// in order: nothing the watch brought is due before these.
				pending = append([]vacancy{{v: v, at: started.Add(r.cfg.OrphanGrace)}}, pending...)
			}
		case <-due:
			now := r.cfg.Clock.Now()
			for len(pending) > 0 && !pending[0].at.After(now) {
				r.orphan(ctx, term, pending[0].v)
				pending = pending[1:]
			}
		case <-ctx.Done():
			return
		}
	}
}

// vacantAtStart returns the queues of live entries that nobody leads, each once, with the entry's
// owner as the previous leader: vacated before the term began. One read of the leaders; a failure is
// logged and leaves them to the cycle.
func (r *Reconciler) vacantAtStart(ctx context.Context, live []heartbeat.Entry) []election.Vacated {
	if len(live) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	leaders, err := r.leaders.Leaders(cctx, r.cfg.Project)
	if err != nil {
		r.log.Info("queues vacated before this term not looked for; left to the cycle", zap.Error(err))
		return nil
	}
	var out []election.Vacated
	seen := map[string]bool{}
	for _, e := range live {
		if _, led := leaders[e.Queue]; led || seen[e.Queue] {
			continue
		}
		seen[e.Queue] = true
		out = append(out, election.Vacated{Queue: e.Queue, Previous: election.Leader{ID: e.ServerID, Token: e.Token}})
	}
	return out
}

// orphan looks at a queue vacated OrphanGrace ago: still nobody standing, and a heartbeat entry left
// by its last owner, it cleans the entry's run and the entry up as a cycle would.
func (r *Reconciler) orphan(ctx context.Context, term Term, v election.Vacated) {
	log := r.log.With(zap.String("queue", v.Queue), zap.String("previous_leader", v.Previous.ID),
		zap.Int64("previous_token", v.Previous.Token))
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	if _, err := r.leaders.Leader(cctx, r.cfg.Project, v.Queue); !errors.Is(err, election.ErrNoLeader) {
		if err != nil {
			log.Info("vacated queue's leader unknown; left to the cycle", zap.Error(err))
		}
		return // someone stands again: their takeover ends the old run
	}
	id, err := takeover.WorkflowID(r.cfg.Project, v.Queue)
	if err != nil {
		return // not a queue Baton could have led
	}
	key, fields, err := r.entryOf(cctx, id)
	if err != nil || len(fields) == 0 {
		log.Info("vacated queue has no heartbeat entry to act on; left to the cycle's sweep", zap.NamedError("redis_error", err))
		return
	}
	e, err := heartbeat.Decode(r.cfg.Prefix, key, fields)
	if err != nil {
		log.Warn("vacated queue's heartbeat entry is malformed; left to the cycle", zap.Error(err))
		return
	}
	now, err := r.rdb.Time(cctx).Result()
	if err != nil {
		log.Info("redis TIME failed; left to the cycle", zap.Error(err))
		return
	}
	rep := Report{judged: map[string]bool{}}
	if err := r.clean(ctx, term, e, now, &rep); err != nil {
		log.Info("orphaned dispatcher not cleaned up; left to the cycle", zap.Error(err))
		return
	}
	if rep.Terminated > 0 {
		r.metrics.orphan(ctx)
		log.Info("orphaned dispatcher cleaned up: its queue stayed without a candidate after its owner's key went",
			zap.String("workflow_id", e.WorkflowID), zap.String("run_id", e.RunID), zap.Duration("grace", r.cfg.OrphanGrace))
	}
}

// entryOf reads the heartbeat entry of workflow id: its key in the project's layout, or, unless
// SkipLegacyHeartbeats, in the layout before per-project keys when there is none.
func (r *Reconciler) entryOf(ctx context.Context, id string) (key string, fields map[string]string, err error) {
	key = heartbeat.Key(r.cfg.Prefix, r.cfg.Project, id)
	fields, err = r.rdb.HGetAll(ctx, key).Result()
	if err != nil || len(fields) > 0 || r.cfg.SkipLegacyHeartbeats {
		return key, fields, err
	}
	key = heartbeat.LegacyKey(r.cfg.Prefix, id)
	fields, err = r.rdb.HGetAll(ctx, key).Result()
	return key, fields, err
}

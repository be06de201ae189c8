package sim

import (
	"context"
	"math/rand/v2"
	"strings"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"

	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/takeover"
)

type (
	listRequest  = workflowservice.ListWorkflowExecutionsRequest
	listResponse = workflowservice.ListWorkflowExecutionsResponse
)

// stream is the seed's stream called name, drawn from under tmu.
func (w *ReconcilerWorld) stream(name string) *rand.Rand {
	if w.streams == nil {
		w.streams = map[string]*rand.Rand{}
	}
	r := w.streams[name]
	if r == nil {
		r = w.s.Rand(name)
		w.streams[name] = r
	}
	return r
}

// visibilityLag is the Temporal model's Options.VisibilityLag: a seeded share of starts and closes
// shows late in visibility (a new run not listed yet, a closed run still listed as running).
func (w *ReconcilerWorld) visibilityLag(bool) time.Duration {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	t := w.plan.temporal
	if w.healed || t.lagRate == 0 || w.lagR.Float64() >= t.lagRate {
		return 0
	}
	return time.Duration(w.lagR.Int64N(int64(t.maxLag)))
}

// listLatency is how long one visibility page takes for who.
func (w *ReconcilerWorld) listLatency(who string) time.Duration {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	if w.plan.temporal.listLatency == 0 {
		return 0
	}
	return time.Duration(w.stream("list/" + who).Int64N(int64(w.plan.temporal.listLatency)))
}

// temporalFate is what the Temporal network does to one request.
type temporalFate struct {
	delay              time.Duration
	dropBefore, dropAt bool
}

// drawTemporal draws the fate of who's request to workflow id from a stream of that pair: a process's
// goroutines send at once (its owners, its reconciler), and one stream would make the fates depend on
// which of them the Go runtime ran first.
func (w *ReconcilerWorld) drawTemporal(who, id string) temporalFate {
	w.tmu.Lock()
	defer w.tmu.Unlock()
	r := w.stream("temporal/" + who + "/" + id)
	f := temporalFate{delay: time.Millisecond + time.Duration(r.Int64N(int64(time.Millisecond)))}
	t := w.plan.temporal
	if w.healed {
		return f
	}
	if r.Float64() < t.delay {
		f.delay += time.Duration(r.Int64N(int64(t.maxDelay)))
	}
	f.dropBefore = r.Float64() < t.dropBefore
	f.dropAt = !f.dropBefore && r.Float64() < t.lostResp
	return f
}

type temporalReply struct {
	v   any
	err error
}

// sender is the Temporal network of one process: each request is checked as it leaves, delivered
// after its delay by a timer of its own (a request its caller gave up on still lands), and may be
// lost before or after its effect.
func (w *ReconcilerWorld) sender(who string) temporalmodel.Sender {
	return func(ctx context.Context, req temporalmodel.Request) (any, error) {
		w.checkSent(who, req)
		f := w.drawTemporal(who, req.WorkflowID())
		out := make(chan temporalReply, 1)
		time.AfterFunc(f.delay, func() {
			if f.dropBefore {
				out <- temporalReply{err: serviceerror.NewUnavailable("sim: request lost")}
				return
			}
			v, err := w.applyTemporal(who, req)
			if f.dropAt {
				v, err = nil, serviceerror.NewUnavailable("sim: response lost")
			}
			out <- temporalReply{v, err}
		})
		select {
		case r := <-out:
			return r.v, r.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// checkSent holds fencing: a terminate the reconciler sends leaves while its term's key is in etcd.
// The reconciler confirms its term right before; nothing in between lets simulated time pass.
func (w *ReconcilerWorld) checkSent(who string, req temporalmodel.Request) {
	if req.Verb != temporalmodel.VerbTerminate {
		return
	}
	r, ok := takeover.ParseReason(req.Terminate.Reason)
	if !ok || r.Kind != takeover.ReasonStaleHeartbeat && r.Kind != takeover.ReasonNoLiveOwner {
		return
	}
	for _, kv := range w.model.Prefix(recCandidates()) {
		if kv.CreateRevision == r.Token {
			return
		}
	}
	w.violate("%s sent a %s terminate of %s at reconciler token %d after that term ended in etcd", who, r.Kind, req.Terminate.WorkflowID, r.Token)
}

// applyTemporal delivers req to the model and holds the reconciler's safety on its effect: a run it
// closes is one whose owner's term has ended (no candidate key at the run's token) and is not newer
// than the queue's leader. It feeds the
// probes of the orphan watch (a stale-heartbeat termination of an entry not yet stale is the
// watch's: a cycle acts on stale entries only).
func (w *ReconcilerWorld) applyTemporal(who string, req temporalmodel.Request) (any, error) {
	w.amu.Lock()
	defer w.amu.Unlock()
	id := ""
	if req.Verb == temporalmodel.VerbTerminate || req.Verb == temporalmodel.VerbStart {
		id = req.WorkflowID()
	}
	before, wasOpen := w.temporal.Open(id)
	v, err := w.temporal.Apply(req)
	if id == "" {
		return v, err
	}
	after, isOpen := w.temporal.Open(id)
	if !wasOpen || isOpen && after.RunID == before.RunID {
		return v, err
	}
	w.checkCloser(who, req, before)
	if req.Verb != temporalmodel.VerbTerminate {
		return v, err
	}
	r, ours := takeover.ParseReason(req.Terminate.Reason)
	if !ours || r.Kind != takeover.ReasonStaleHeartbeat && r.Kind != takeover.ReasonNoLiveOwner {
		return v, err
	}
	owner, _, derr := takeover.DecodeOwner(w.dc, before.Memo)
	q := w.wfq[id]
	w.note(who, "reconciler token=%d %s closed run %s of %s (owner token %d)", r.Token, r.Kind, shortRun(before.RunID), q, owner.Token)
	if derr != nil {
		w.violate("%s closed run %s of %s whose owner it cannot read: %v", who, shortRun(before.RunID), id, derr)
		return v, err
	}
	for _, kv := range w.model.Prefix(queueCandidates(q)) {
		if kv.CreateRevision == owner.Token {
			w.violate("reconciler %s (token %d, %s) closed run %s of %s, whose owner %s's term (token %d) etcd still holds",
				who, r.Token, r.Kind, shortRun(before.RunID), q, owner.ServerID, owner.Token)
		}
	}
	// A run newer than the queue's leader is not the reconciler's to judge (its sweep counts it
	// undecided): without a restore, no such run can exist, and closing one means a wrong comparison.
	if l := w.model.Oldest(queueCandidates(q)); l != nil && owner.Token > l.CreateRevision {
		w.violate("reconciler %s (token %d, %s) closed run %s of %s, whose owner token %d is newer than the leader's (%s, token %d)",
			who, r.Token, r.Kind, shortRun(before.RunID), q, owner.Token, l.Value, l.CreateRevision)
	}
	if r.Kind == takeover.ReasonStaleHeartbeat && r.Stale <= recStaleAfter {
		w.probe(ProbeRecVacancyWatch)
		w.rmu.Lock()
		vacated, termAt := w.vacatedAt[q], w.recLeadAt[r.Token]
		w.rmu.Unlock()
		if !vacated.IsZero() && !termAt.IsZero() && vacated.Before(termAt) {
			w.probe(ProbeRecVacantAtStart)
		}
	}
	return v, err
}

// checkCloser holds that no run is closed by an older term than its owner's: a start (a conflict
// policy that ends the current run) or a takeover's terminate that closes an open run carries a
// token no lower than the run's owner token. The reconciler's terminates carry its own election's
// token, which the reconciler's checks judge instead.
func (w *ReconcilerWorld) checkCloser(who string, req temporalmodel.Request, closed temporalmodel.Run) {
	var token int64
	if req.Verb == temporalmodel.VerbStart {
		o, found, err := takeover.DecodeOwner(w.dc, req.Start.Memo)
		if err != nil || !found {
			return
		}
		token = o.Token
	} else {
		r, ok := takeover.ParseReason(req.Terminate.Reason)
		if !ok || r.Kind == takeover.ReasonStaleHeartbeat || r.Kind == takeover.ReasonNoLiveOwner {
			return
		}
		token = r.Token
	}
	owner, found, err := takeover.DecodeOwner(w.dc, closed.Memo)
	if err == nil && found && token < owner.Token {
		w.violate("%s's %s at token %d closed run %s of %s, whose owner %s has the newer token %d", who, req.Verb, token,
			shortRun(closed.RunID), w.wfq[closed.WorkflowID], owner.ServerID, owner.Token)
	}
}

// lookRedis compares the project's heartbeat entries with the last look: an entry that went (not by
// a FLUSHALL, its key TTL, or its owner's own clear (ownClear), which the world knows of) was deleted
// by the reconciler, and must not have been written by a term etcd still holds. It runs before every script and at every step, so
// the last look is the store as the deleting script found it.
func (w *ReconcilerWorld) lookRedis() {
	m := w.redis.Mini()
	prefix := heartbeat.ProjectPrefix(heartbeat.DefaultPrefix, Project)
	now := map[string]map[string]string{}
	for _, k := range m.Keys() {
		if !strings.HasPrefix(k, prefix) || m.Type(k) != "hash" {
			continue
		}
		fields := map[string]string{}
		ks, _ := m.HKeys(k)
		for _, f := range ks {
			fields[f] = m.HGet(k, f)
		}
		if _, err := heartbeat.Decode(heartbeat.DefaultPrefix, k, fields); err == nil {
			now[k] = fields
		}
	}
	w.hmu.Lock()
	prev := w.seen
	w.seen = now
	w.hmu.Unlock()
	for k, fields := range prev {
		if _, ok := now[k]; ok || m.Exists(k) { // still there (rewritten as garbage: the owner replaces it)
			continue
		}
		e, _ := heartbeat.Decode(heartbeat.DefaultPrefix, k, fields)
		if time.Since(e.UpdatedAt) >= recKeyTTL || w.ownClear != nil && w.ownClear(e) {
			continue
		}
		for _, kv := range w.model.Prefix(queueCandidates(e.Queue)) {
			if kv.CreateRevision == e.Token {
				w.violate("the heartbeat entry of %s by %s (token %d, written %v ago) was deleted while etcd still holds its term",
					e.Queue, e.ServerID, e.Token, time.Since(e.UpdatedAt).Round(time.Millisecond))
			}
		}
	}
}

// checkHealed holds the reconciler's promise recHealBound after the heal: no open run and no entry
// of a queue nobody stands for, and the run of every queue's leader open.
func (w *ReconcilerWorld) checkHealed(since time.Duration) {
	w.lookRedis()
	w.hmu.Lock()
	entries := map[string]heartbeat.Entry{}
	for k, fields := range w.seen {
		if e, err := heartbeat.Decode(heartbeat.DefaultPrefix, k, fields); err == nil {
			entries[e.Queue] = e
		}
	}
	w.hmu.Unlock()
	for _, q := range w.queues {
		id, _ := takeover.WorkflowID(Project, q)
		leader := w.model.Oldest(queueCandidates(q))
		run, open := w.temporal.Open(id)
		owner, _, _ := takeover.DecodeOwner(w.dc, run.Memo)
		e, hasEntry := entries[q]
		switch {
		case leader == nil && open:
			w.violate("liveness: %v after the heal, run %s of %s (owner %s, token %d) is open and nobody stands for the queue",
				since, shortRun(run.RunID), q, owner.ServerID, owner.Token)
		case leader == nil && hasEntry:
			w.violate("liveness: %v after the heal, the heartbeat entry of %s (owner %s, token %d) is there and nobody stands for the queue",
				since, q, e.ServerID, e.Token)
		case leader != nil && (!open || owner.Token != leader.CreateRevision):
			w.violate("liveness: %v after the heal, %s's leader %s (token %d) has no open run of its own (open=%v, run owner token %d)",
				since, q, leader.Value, leader.CreateRevision, open, owner.Token)
		}
	}
	w.rec.Add("world", "checked %v after the heal", since)
}

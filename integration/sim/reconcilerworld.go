package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"github.com/baton-run/baton/integration/sim/redismodel"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.temporal.io/sdk/converter"
)

// The probes a reconciler batch must hit.
const (
	ProbeRecVacancyWatch  = "orphan cleaned by the vacancy watch, not the cycle"
	ProbeRecVacantAtStart = "orphan of a queue vacated before the reconciler's term cleaned by the watch"
	ProbeRecRefreshed     = "stale entry spared: written again before its delete"
	ProbeRecSkipped       = "listed run left alone: its owner undecided or its leader live"
	ProbeRecLostMidCycle  = "reconciler term lost mid-cycle"
)

// ReconcilerProbes are the probes of TestSimReconciler.
var ReconcilerProbes = []string{ProbeRecVacancyWatch, ProbeRecVacantAtStart, ProbeRecRefreshed, ProbeRecSkipped, ProbeRecLostMidCycle}

// ReconcilerWorld is one schedule of the reconciler simulator: 3-5 processes wired as baton.Node
// wires them (rnode), 2-8 queues, the etcd model behind the faulty Net, the Temporal model behind a
// faulty network of its own (delays, requests lost before or after their effect) with visibility
// lag and slow listing, and the Redis model, for 45 s of seeded faults (crashes, pauses past the TTL,
// partitions, no-leader windows, the whole fleet down at once, the reconciler leader's lease revoked
// mid-cycle, FLUSHALL, garbage entries, Redis down, a queue removed with its owner dead), then a heal.
//
// Invariants, at the moment each effect lands: a terminate the reconciler sends is sent while its
// term's key is held in etcd (fencing); a run the reconciler closes belongs to an owner whose term
// has ended (no candidate key at the run's token); a heartbeat entry that disappears was not written
// by a term etcd still holds. After the heal, within recHealBound: no open run of a queue nobody
// stands for, no entry of such a queue, and every queue that has a leader has that leader's run open.
type ReconcilerWorld struct {
	stage
	t      *testing.T
	plan   recPlan
	ctx    context.Context
	queues []string
	wfq    map[string]string // queue by workflow ID

	redis    *redismodel.Server
	temporal *temporalmodel.Model
	dc       converter.DataConverter

	fleet[*rnode] // mu: the processes, and removed
	removed       map[string]bool

	tmu    sync.Mutex // the Temporal network's and visibility's draws, and healed
	healed bool
	lagR   *rand.Rand
	// streams are the Temporal network's and the listing's, per process (stream)
	streams map[string]*rand.Rand

	amu sync.Mutex // one Temporal effect checked at a time

	hmu  sync.Mutex                   // the heartbeat entries as last seen
	seen map[string]map[string]string // key -> fields, of every well-formed hash under the project's prefix
	// ownClear, if set, tells an entry its owner cleared itself (a Node's hand-over) from one the
	// reconciler deleted.
	ownClear func(heartbeat.Entry) bool

	nmu   sync.Mutex
	notes []recNote // lines from the processes' goroutines, recorded in order at the scheduler's next step
	start time.Time

	// under rmu (written by onCommit, under the etcd model's lock)
	vacatedAt map[string]time.Time // queue -> when its last candidate key went
	recLeadAt map[int64]time.Time  // reconciler term's token -> when its key became the oldest candidate
}

// RunReconciler runs the reconciler world for seed in its own synctest bubble; keep keeps the timeline.
func RunReconciler(t *testing.T, seed uint64, keep bool) Result {
	return runInBubble(t, seed, keep, runReconciler)
}

func runReconciler(t *testing.T, seed uint64, keep bool) Result {
	s := Streams{Seed: seed}
	p := drawRecPlan(s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := newReconcilerWorld(ctx, t, s, keep, p)
	w.launch(p.nodes, w.newNode)
	w.loop(w.start, w)
	w.redis.Close()
	w.flushNotes()
	return w.result(seed, w.start, p)
}

// newReconcilerWorld sets up the servers of a reconciler schedule (the etcd model behind the Net, the
// Redis model, the Temporal model with visibility lag) and the plan's queues; it starts no process.
func newReconcilerWorld(ctx context.Context, t *testing.T, s Streams, keep bool, p recPlan) *ReconcilerWorld {
	w := &ReconcilerWorld{t: t, plan: p, ctx: ctx, wfq: map[string]string{}, removed: map[string]bool{},
		dc: converter.GetDefaultDataConverter(), seen: map[string]map[string]string{}, vacatedAt: map[string]time.Time{},
		recLeadAt: map[int64]time.Time{}, lagR: s.Rand("visibility-lag")}
	w.setUp(s, keep, p.net, w.onCommit, p)
	for i := range p.queues {
		q := queueName(i)
		id, err := takeover.WorkflowID(Project, q)
		if err != nil {
			t.Fatal(err)
		}
		w.queues = append(w.queues, q)
		w.wfq[id] = q
	}
	w.redis = redismodel.New(func(cmd string) {
		if cmd == "EVALSHA" || cmd == "EVAL" { // top-level: no script holds the store
			w.lookRedis()
		}
	})
	w.temporal = temporalmodel.New(temporalmodel.Options{Clock: s.NewClock("temporal"), VisibilityLag: w.visibilityLag})
	w.start = time.Now()
	return w
}

func queueName(i int) string { return fmt.Sprintf("q%d", i) }

// recScheduled is what the reconciler world's scheduler asks of the world it drives: the reconciler
// world itself, or the node world, which has whole Nodes for processes.
type recScheduled interface {
	apply(f recFault, now time.Time)
	heal()
	step(now time.Time)         // the world's own checks, at every quiescent moment
	finish(since time.Duration) // the promise after the heal
	stopFleet()                 // every live process stopped gracefully, and the world's background work done
}

func (w *ReconcilerWorld) step(time.Time)             {}
func (w *ReconcilerWorld) finish(since time.Duration) { w.checkHealed(since) }
func (w *ReconcilerWorld) stopFleet()                 { w.stopAll(&w.stage) }

// loop is the scheduler, as World.loop: at every quiescent moment it looks at Redis, applies the due
// events, and delivers one etcd message; the heal turns the faults off, and recHealBound later the
// world's promise is checked and the processes stopped. x is the world it drives (w, or a world
// built on w's servers).
func (w *ReconcilerWorld) loop(start time.Time, x recScheduled) {
	chaosEnd := start.Add(recChaos)
	checkAt := chaosEnd.Add(recHealBound)
	stopped := make(chan struct{})
	healed, stopping := false, false
	events := w.plan.faults
	for {
		w.quiesce()
		now := time.Now()
		w.flushNotes()
		w.lookRedis()
		x.step(now)
		acted := false // a fault or a phase woke goroutines: they run to a stop before the next delivery
		for len(events) > 0 && !start.Add(events[0].after).After(now) {
			x.apply(events[0], now)
			events, acted = events[1:], true
		}
		if !healed && !now.Before(chaosEnd) {
			healed, acted = true, true
			x.heal()
		}
		if !stopping && !now.Before(checkAt) {
			stopping, acted = true, true
			x.finish(now.Sub(chaosEnd))
			go func() { x.stopFleet(); close(stopped) }()
		}
		if chanClosed(stopped) {
			w.model.Close()
			w.net.Close()
			return
		}
		if acted {
			continue
		}
		ok, next := w.net.Step(now)
		if ok {
			continue
		}
		due := checkAt
		switch {
		case stopping:
			due = now.Add(time.Second)
		case !healed:
			due = chaosEnd
		}
		if len(events) > 0 && start.Add(events[0].after).Before(due) {
			due = start.Add(events[0].after)
		}
		if !next.IsZero() && next.Before(due) {
			due = next
		}
		w.sleep(now, due, stopped)
	}
}

// apply carries out one planned event.
func (w *ReconcilerWorld) apply(f recFault, now time.Time) {
	w.rec.Add("world", "event %s node=%d dur=%v n=%d", f.kind, f.node, f.dur, f.n)
	if w.applyServers(f) || w.applyProcs(w, f, now) {
		return
	}
	if f.kind == RecFaultRemove {
		w.remove(w.queues[f.n])
	}
}

// recProcs is what a process fault does to the processes of a world built on the reconciler world's
// servers (its own, or the node world's).
type recProcs interface {
	crash(slot int)
	restartSlot(slot int) // a new incarnation, if the process is down
	slotOf(kv *mvccpb.KeyValue) (int, bool)
	procName(slot int) string
	procs() int
}

func (w *ReconcilerWorld) restartSlot(slot int) { w.restart(slot, w.newNode) }

// applyProcs carries out an event that befalls x's processes, and reports whether f was one.
func (w *ReconcilerWorld) applyProcs(x recProcs, f recFault, now time.Time) bool {
	name := x.procName(f.node)
	switch f.kind {
	case RecFaultCrash:
		if f.n%3 == 0 { // the reconciler leader's process: its term and the queues it owns end together
			if slot, ok := x.slotOf(w.model.Oldest(recCandidates())); ok {
				x.crash(slot)
				break
			}
		}
		x.crash(f.node)
	case recRestart:
		x.restartSlot(f.node)
	case RecFaultFleet:
		for slot := range x.procs() {
			x.crash(slot)
		}
	case recFleetRestart:
		for slot := range x.procs() {
			x.restartSlot(slot)
		}
	case RecFaultPause:
		w.net.Hold(name, now.Add(electionTTL+f.dur))
	case RecFaultPartition:
		w.net.Cut(name, true)
	case recPartitionEnd:
		w.net.Cut(name, false)
	default:
		return false
	}
	return true
}

// applyServers carries out an event that befalls the servers, not a process (the node world's too),
// and reports whether f was one.
func (w *ReconcilerWorld) applyServers(f recFault) bool {
	switch f.kind {
	case RecFaultRevoke:
		if kv := w.model.Oldest(recCandidates()); kv != nil && w.model.Revoke(kv.Lease) {
			w.rec.Add("world", "revoked the reconciler leader's lease (%s@%d)", kv.Value, kv.CreateRevision)
		}
	case RecFaultFlush:
		w.redis.FlushAll()
		w.hmu.Lock()
		clear(w.seen)
		w.hmu.Unlock()
	case RecFaultGarbage:
		w.garbage(f.n, f.node%2 == 0)
	case RecFaultRedisDown:
		w.redis.SetDown(true)
	case recRedisUp:
		w.redis.SetDown(false)
	case recFaultNoLeader:
		w.model.SetLeader(false)
	case recNoLeaderEnd:
		w.model.SetLeader(true)
	default:
		return false
	}
	return true
}

// garbage writes an entry Baton did not write: a string in queue q's own key (its owner's next
// beat replaces it), or a hash without the entry's fields under a workflow ID of no queue.
func (w *ReconcilerWorld) garbage(q int, own bool) {
	m := w.redis.Mini()
	if own {
		id, _ := takeover.WorkflowID(Project, w.queues[q])
		_ = m.Set(heartbeat.Key(heartbeat.DefaultPrefix, Project, id), "garbage")
		return
	}
	m.HSet(heartbeat.Key(heartbeat.DefaultPrefix, Project, "baton/"+Project+"/stray"), "token", "x", "note", "not Baton's")
}

// remove drops q from every process's configuration: its leader dies with it (what it leaves is
// the reconciler's to clean, as after a crash with no successor), the others stop standing.
func (w *ReconcilerWorld) remove(q string) {
	owner, ok := w.slotOf(w.model.Oldest(queueCandidates(q)))
	w.mu.Lock()
	w.removed[q] = true
	w.mu.Unlock()
	if ok {
		w.crash(owner)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, n := range w.slots {
		if cancel := n.stands[q]; cancel != nil && !n.crashed {
			cancel()
		}
	}
}

// heal turns every fault off and restarts every crashed process.
func (w *ReconcilerWorld) heal() {
	w.healServers()
	for slot, n := range w.slots {
		w.net.Cut(n.name, false)
		w.net.Hold(n.name, time.Time{})
		w.restart(slot, w.newNode)
	}
}

// healServers turns every fault of the networks and the servers off (the node world's heal too).
func (w *ReconcilerWorld) healServers() {
	w.rec.Add("world", "heal")
	w.tmu.Lock()
	w.healed = true
	w.tmu.Unlock()
	w.net.SetFaults(NetFaults{Detect: w.plan.net.Detect})
	w.model.SetLeader(true)
	w.redis.SetDown(false)
}

// queueCandidates is the prefix of the candidate keys of queue q's election (the election package's
// key layout under its default prefix).
func queueCandidates(q string) string {
	return election.Keys{Prefix: election.DefaultConfig().Prefix}.Candidates(Project, q)
}

func recCandidates() string {
	return election.Keys{Prefix: reconciler.DefaultElectionPrefix}.Candidates(Project, reconciler.ElectionQueue)
}

// onCommit notes, under the etcd model's lock, when each queue lost its last candidate and when each
// reconciler candidate became the oldest (its term begins then, as soon as it hears).
func (w *ReconcilerWorld) onCommit(_ int64, events []*mvccpb.Event, view etcdmodel.View) {
	now := time.Now()
	w.rmu.Lock()
	defer w.rmu.Unlock()
	for _, ev := range events {
		k := string(ev.Kv.Key)
		switch {
		case strings.HasPrefix(k, recCandidates()):
			if o := view.Oldest(recCandidates()); o != nil && w.recLeadAt[o.CreateRevision].IsZero() {
				w.recLeadAt[o.CreateRevision] = now
			}
		case ev.Type == mvccpb.DELETE:
			for _, q := range w.queues {
				if strings.HasPrefix(k, queueCandidates(q)) && view.Oldest(queueCandidates(q)) == nil {
					w.vacatedAt[q] = now
				}
			}
		}
	}
}

// recNote is a line of a process's goroutine, with its time.
type recNote struct {
	at       time.Duration
	who, msg string
}

// note buffers a line of a process's goroutine: goroutines that run at one instant do so in the Go
// runtime's order, so the scheduler records their lines sorted (flushNotes), each with its own time.
func (w *ReconcilerWorld) note(who, format string, args ...any) {
	n := recNote{at: time.Since(w.start), who: who, msg: fmt.Sprintf(format, args...)}
	w.nmu.Lock()
	defer w.nmu.Unlock()
	w.notes = append(w.notes, n)
}

func (w *ReconcilerWorld) flushNotes() {
	w.nmu.Lock()
	notes := w.notes
	w.notes = nil
	w.nmu.Unlock()
	slices.SortFunc(notes, func(a, b recNote) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.who, b.who), cmp.Compare(a.msg, b.msg))
	})
	for _, n := range notes {
		w.rec.Add(n.who, "%s [at %.3fs]", n.msg, n.at.Seconds())
	}
}

// cycled records a reconcile cycle's report and feeds the probes.
func (w *ReconcilerWorld) cycled(who string, rep reconciler.Report) {
	w.note(who, "cycle token=%d active=%d stale=%d protected=%d terminated=%d deleted=%d refreshed=%d malformed=%d open=%d orphans=%d undecided=%d err=%v",
		rep.Token, rep.Active, rep.Stale, rep.Protected, rep.Terminated, rep.Deleted, rep.Refreshed, rep.Malformed, rep.Open, rep.Orphans,
		rep.Undecided, rep.Err != nil)
	if rep.Refreshed > 0 {
		w.probe(ProbeRecRefreshed)
	}
	if rep.Undecided > 0 || rep.Open > rep.Orphans {
		w.probe(ProbeRecSkipped)
	}
	if errors.Is(rep.Err, reconciler.ErrNotLeader) {
		w.probe(ProbeRecLostMidCycle)
	}
}

// owned records a takeover's run.
func (w *ReconcilerWorld) owned(n *rnode, q string, t *election.Term, run takeover.Run) {
	w.note(n.name, "owns %s token=%d run %s (%s)", q, t.Token(), shortRun(run.RunID), run.Path)
}

// shortRun is a model run ID's counter, enough for a reader.
func shortRun(runID string) string {
	if i := strings.LastIndexByte(runID, '-'); i >= 0 {
		return "#" + strings.TrimLeft(runID[i+1:], "0")
	}
	return runID
}

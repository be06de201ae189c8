package sim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// ProbeCompactedWatch is the probe hit by a schedule in which a watch was opened below etcd's
// compaction (clientv3 then ends it with ErrCompacted and the Elector must read again).
const ProbeCompactedWatch = "watch opened below the compaction"

// Project is the project every simulated process campaigns in.
const Project = "sim"

// electionTTL is the lease TTL of every simulated process: short, so that a minute of simulated time
// holds many terms (election.MinTTL is 2 s; 3 s leaves a margin and keepalive interval of whole ms).
const electionTTL = 3 * time.Second

// Result is what one schedule found.
type Result struct {
	Seed       uint64
	Violations []string
	Hash       uint64
	Simulated  time.Duration
	Probes     map[string]int
	Timeline   string
	Setup      string
	// Lanes is the timeline split by process (optional): a replay logs each after the whole.
	Lanes map[string]string
}

// World is one schedule of the election simulator.
type World struct {
	stage
	t      *testing.T
	seed   uint64
	plan   plan
	ctx    context.Context
	queues []string
	margin time.Duration
	start  time.Time

	fleet[*node] // mu: the processes and their terms; held while reading the model, never inside onCommit
	healedAt     time.Time
	held         []heldTerm          // acting's list, reused from step to step (under mu)
	owners       map[string][]string // acting's answer, reused from step to step (the loop's alone)

	writes map[string]fenced // under rmu, with the violations and probes
}

// fenced is a guarded write in flight: the term it was issued under.
type fenced struct {
	key   string
	token int64
}

// RunElection runs the election world for seed in its own synctest bubble; keep keeps the timeline.
func RunElection(t *testing.T, seed uint64, keep bool) Result {
	return runInBubble(t, seed, keep, func(t *testing.T, seed uint64, keep bool) Result { return runElection(t, seed, keep, 0) })
}

// RunElectionAtRate runs the election world for seed with every process's clock at rate (skew.go),
// whatever the seed draws: the drift bound's own test.
func RunElectionAtRate(t *testing.T, seed uint64, keep bool, rate float64) Result {
	return runInBubble(t, seed, keep, func(t *testing.T, seed uint64, keep bool) Result { return runElection(t, seed, keep, rate) })
}

func runElection(t *testing.T, seed uint64, keep bool, rate float64) Result {
	s := Streams{Seed: seed}
	p := drawPlan(s)
	if rate != 0 {
		p.skews = make([]float64, p.nodes)
		for i := range p.skews {
			p.skews[i] = rate
		}
	}
	w := &World{t: t, seed: seed, plan: p, ctx: t.Context(), writes: map[string]fenced{},
		margin: election.DefaultConfig().SafetyMargin * electionTTL / election.DefaultConfig().TTL}
	w.setUp(s, keep, p.net, w.onCommit, p)
	for i := range p.queues {
		w.queues = append(w.queues, fmt.Sprintf("q%d", i))
	}
	start := time.Now()
	w.start = start
	w.launch(p.nodes, w.newNode)
	w.loop(start)
	return w.result(seed, start, p)
}

// loop is the scheduler: whenever the bubble is quiescent it checks the invariants, applies due
// faults, and delivers one message; otherwise it lets time run to the next thing due.
func (w *World) loop(start time.Time) {
	chaosEnd := start.Add(w.plan.chaos)
	healEnd := chaosEnd.Add(w.plan.heal)
	stopped := make(chan struct{})
	stopping := false
	faults := w.plan.events(start)
	for {
		w.quiesce()
		now := time.Now()
		w.check(now, !now.Before(chaosEnd))
		acted := false // a fault or a phase woke goroutines: they run to a stop before the next delivery
		for len(faults) > 0 && !faults[0].at.After(now) {
			w.apply(faults[0], now)
			faults, acted = faults[1:], true
		}
		if !stopping && !now.Before(chaosEnd) && w.plan.healed {
			w.heal(now)
			w.plan.healed, acted = false, true
		}
		if !stopping && (!now.Before(healEnd) || (!w.healedAt.IsZero() && now.Sub(w.healedAt) > 5*time.Second)) {
			stopping, acted = true, true
			w.endLiveness(now)
			go func() { w.stopAll(&w.stage); close(stopped) }()
		}
		select {
		case <-stopped:
			if n := w.model.CompactedWatches(); n > 0 {
				w.probe(ProbeCompactedWatch)
			}
			w.model.Close() // first: it releases requests waiting for a leader
			w.net.Close()
			return
		default:
		}
		if acted {
			continue
		}
		ok, next := w.net.Step(now)
		if ok {
			continue
		}
		w.sleep(now, earliest(now, next, faults, chaosEnd, healEnd), stopped)
	}
}

// earliest is the next instant something is due: a held message, a fault, the end of a phase.
func earliest(now, next time.Time, faults []faultEvent, chaosEnd, healEnd time.Time) time.Time {
	due := healEnd
	if now.Before(chaosEnd) {
		due = chaosEnd
	}
	if !next.IsZero() && next.Before(due) {
		due = next
	}
	if len(faults) > 0 && faults[0].at.Before(due) {
		due = faults[0].at
	}
	if !due.After(now) {
		due = now.Add(time.Second) // stopping: poll until every process has stopped
	}
	return due
}

// onCommit checks every fenced write as the model commits it (under the model's lock).
func (w *World) onCommit(rev int64, events []*mvccpb.Event, view etcdmodel.View) {
	for _, ev := range events {
		if ev.Type != mvccpb.PUT || !isFenceKey(string(ev.Kv.Key)) {
			continue
		}
		w.rmu.Lock()
		f, ok := w.writes[string(ev.Kv.Value)]
		w.rmu.Unlock()
		if !ok {
			continue
		}
		if kv := view.Get(f.key); kv == nil || kv.CreateRevision != f.token {
			w.violate("fenced write %s of term %s@%d committed at revision %d after its term's key was gone", ev.Kv.Value, f.key, f.token, rev)
		} else if o := view.Oldest(election.CandidatePrefix(f.key)); o.CreateRevision != f.token {
			w.violate("fenced write %s of term %s@%d committed at revision %d while an older candidate %s@%d led", ev.Kv.Value, f.key, f.token, rev, o.Key, o.CreateRevision)
		}
	}
}

package sim

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The balance world's probes: rare events a balance batch must reach.
const (
	ProbeDrainHandedOver = "drain handed a queue over"
	ProbeDrainKept       = "draining worker kept a queue nobody else serves"
	ProbeShedMove        = "shed moved a queue"
	ProbeRolloutMove     = "rolling deploy moved a queue"
)

// BalanceWorld is one schedule of the balance simulator: 3-5 processes, each a real election.Elector
// and a real balance.Runner over the etcd model, each serving a seeded subset of 2-8 queues (queue q0
// by one process alone, others by a seeded set), under drains and undrains, crashes and restarts and
// the network's faults for a minute, then a heal (every fault off, every process up, the process that
// alone serves q0 drained in most seeds), a settle window and a stable window. Invariants: at most one
// owner per queue at every step (a live term that passes Check and whose key etcd holds), fail closed;
// at the end of the settle window every queue has one owner (every queue has a candidate that is up,
// drained or not); in the stable window no queue changes owner (a queue only a draining worker serves
// stays with it, no flapping); after the heal a drain moves each queue at most once. Owner changes
// per queue are counted from the heal on and reported in the trace.
type BalanceWorld struct {
	stage
	t     *testing.T
	plan  balancePlan
	ctx   context.Context
	keep  bool // a replay: the Runners' logs join the timeline
	start time.Time

	fleet[*bnode]
	version string              // of the next incarnation
	handing map[string]handOver // per queue: the last hand-over announced, until the next election
	owner   map[string]string   // the server ID that last won each queue
	phase   int                 // 0 chaos, 1 settle, 2 stable, 3 stopping
	changes map[string][2]int   // per queue: owner changes in the settle and the stable windows
	drains  map[string]int      // per queue and draining worker: drain moves after the heal
}

// RunBalance runs the balance world for seed in its own synctest bubble; keep keeps the timeline.
func RunBalance(t *testing.T, seed uint64, keep bool) Result {
	return runInBubble(t, seed, keep, runBalance)
}

func runBalance(t *testing.T, seed uint64, keep bool) Result {
	s := Streams{Seed: seed}
	p := drawBalancePlan(s)
	w := &BalanceWorld{t: t, plan: p, ctx: t.Context(), handing: map[string]handOver{}, owner: map[string]string{},
		changes: map[string][2]int{}, drains: map[string]int{}, keep: keep}
	w.setUp(s, keep, p.net, nil, p)
	if p.versioned {
		w.version = "v1"
	}
	start := time.Now()
	w.start = start
	w.launch(len(p.serves), w.newNode)
	w.loop(start)
	return w.result(seed, start, p)
}

// loop is the scheduler, as the election world's: at quiescence it checks, applies due events and
// phase changes, and delivers one message; otherwise it lets time run to the next thing due.
func (w *BalanceWorld) loop(start time.Time) {
	ph := w.plan.phases
	ends := []time.Time{start.Add(ph.chaos), start.Add(ph.chaos + ph.settle), start.Add(ph.chaos + ph.settle + ph.stable)}
	events := w.plan.events
	stopped := make(chan struct{})
	for {
		w.quiesce()
		now := time.Now()
		w.check()
		acted := false // a fault or a phase woke goroutines: they run to a stop before the next delivery
		for len(events) > 0 && !start.Add(events[0].after).After(now) {
			w.apply(events[0])
			events, acted = events[1:], true
		}
		w.mu.Lock()
		phase := w.phase
		w.mu.Unlock()
		if phase < 3 && !now.Before(ends[phase]) {
			w.enter(phase + 1)
			acted = true
			if phase+1 == 3 {
				go func() { w.stopAll(&w.stage); close(stopped) }()
			}
		}
		select {
		case <-stopped:
			w.model.Close()
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
		due := now.Add(time.Second)
		if phase < 3 {
			due = ends[phase]
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

// enter starts a phase: the heal (settle), the stable window (after the liveness check), the stop.
func (w *BalanceWorld) enter(phase int) {
	switch phase {
	case 1:
		w.heal()
	case 2:
		w.live()
	}
	w.mu.Lock()
	w.phase = phase
	w.mu.Unlock()
	w.rec.Add("world", "phase %d", phase)
}

// handOver is a hand-over a leader announced (event.HandingOver): why, and by whom.
type handOver struct{ reason, from string }

// elected counts an owner change of q and checks the post-heal bounds; probes and violations go
// through rmu (probe, violate), after mu is released.
func (w *BalanceWorld) elected(n *bnode, q string, t *election.Term) {
	w.rec.Add(n.name, "elected %s token=%d", q, t.Token())
	probe, violations := w.ownerChange(n, q, t)
	if probe != "" {
		w.probe(probe)
	}
	for _, v := range violations {
		w.violate("%s", v)
	}
}

// ownerChange records n's new term of q and returns the probe it hits ("" for none) and the
// violations it makes.
func (w *BalanceWorld) ownerChange(n *bnode, q string, t *election.Term) (probe string, violations []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n.terms[q] = t
	prev, h := w.owner[q], w.handing[q]
	w.owner[q] = n.name
	delete(w.handing, q)
	switch {
	case prev == "" || prev == n.name:
	case h.reason == balance.ReasonDrain:
		probe = ProbeDrainHandedOver
	case h.reason == balance.ReasonShed:
		probe = ProbeShedMove
	case w.versionOf(prev) == "v1" && n.ver == "v2":
		probe = ProbeRolloutMove // a stop's hand-over announces no event: the versions tell
	}
	if w.phase == 0 || w.phase == 3 {
		return probe, nil
	}
	c := w.changes[q]
	c[w.phase-1]++
	w.changes[q] = c
	if w.phase == 2 {
		violations = append(violations, fmt.Sprintf("%s changed owner to %s (token=%d) in the stable window", q, n.name, t.Token()))
	}
	if h.reason == balance.ReasonDrain {
		k := q + " from " + h.from
		if w.drains[k]++; w.drains[k] > 1 {
			violations = append(violations, fmt.Sprintf("the drain of %s moved %s %d times after the heal", h.from, q, w.drains[k]))
		}
	}
	return probe, violations
}

// versionOf returns the version of the incarnation called name; the caller holds mu.
func (w *BalanceWorld) versionOf(name string) string {
	for _, n := range w.nodes {
		if n.name == name {
			return n.ver
		}
	}
	return ""
}

func (w *BalanceWorld) returned(n *bnode, q string, t *election.Term) {
	w.rec.Add(n.name, "returned %s token=%d", q, t.Token())
	w.mu.Lock()
	defer w.mu.Unlock()
	if n.terms[q] == t {
		delete(n.terms, q)
	}
}

// acting lists, per queue, the live processes whose term passes Check and whose key etcd holds with
// the term's token; a draining one that keeps a queue nobody else serves hits a probe.
func (w *BalanceWorld) acting() map[string][]string {
	type held struct {
		n *bnode
		q string
		t *election.Term
	}
	var hs []held
	w.mu.Lock()
	for _, n := range w.nodes {
		for q, t := range n.terms {
			if !n.crashed {
				hs = append(hs, held{n, q, t})
			}
		}
	}
	w.mu.Unlock()
	var acts []held
	w.model.Inspect(func(v etcdmodel.View) {
		for _, h := range hs {
			if h.t.Check() == nil && holds(v, h.t) != nil {
				acts = append(acts, h)
			}
		}
	})
	out := map[string][]string{}
	for _, h := range acts {
		out[h.q] = append(out[h.q], h.n.name)
		if h.n.runner != nil && h.n.runner.HandOverWaiting(h.q) != "" {
			w.probe(ProbeDrainKept)
		}
	}
	return out
}

func (w *BalanceWorld) check() {
	for q, names := range w.acting() {
		if len(names) > 1 {
			w.violate("%d owners of %s at once: %s", len(names), q, strings.Join(names, ","))
		}
	}
}

// live is the liveness check at the end of the settle window: every queue has one owner.
func (w *BalanceWorld) live() {
	act := w.acting()
	for _, q := range w.plan.queues {
		if len(act[q]) != 1 {
			w.violate("liveness: %s has %d owners %v at the end of the settle window; its candidates: %s", q, len(act[q]), act[q],
				w.candidatesOf(q, w.start, w.termOf(q)))
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, q := range w.plan.queues {
		w.rec.Add("world", "%s: owner changes after the heal %d (settle)", q, w.changes[q][0])
	}
}

// logger is a Runner's logger: nothing, or for a replay its lines in the timeline (never parsed).
func (w *BalanceWorld) logger(name string) *zap.Logger {
	if !w.keep {
		return zap.NewNop()
	}
	enc := zapcore.NewConsoleEncoder(zapcore.EncoderConfig{MessageKey: "msg"})
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(recorderWriter{w.rec, name}), zapcore.DebugLevel))
}

// recorderWriter adds each log line to the timeline.
type recorderWriter struct {
	rec  *Recorder
	name string
}

func (r recorderWriter) Write(p []byte) (int, error) {
	r.rec.Add(r.name, "log %s", strings.TrimSpace(string(p)))
	return len(p), nil
}

// termOf says what the world knows of server's term of q.
func (w *BalanceWorld) termOf(q string) func(string) string {
	return func(server string) string {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, n := range w.nodes {
			if n.name != server {
				continue
			}
			state := fmt.Sprintf("crashed=%v draining=%v serves=%v", n.crashed, n.draining, n.queues)
			if t := n.terms[q]; t != nil {
				return fmt.Sprintf("%s term token=%d err=%v", state, t.Token(), t.Err())
			}
			return state + " no term"
		}
		return "unknown"
	}
}

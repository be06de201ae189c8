package balance

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
)

// sim runs the Runners' decisions of a small fleet against one model of the election keys, on one
// fake clock: each round, every worker, for each of its queues, stands (mayStand), steps out of line
// (shouldWithdraw) or hands its term over (heldMove), as its stand loop would; etcd's part is the
// oldest key leading. No successor is named (the only hint written is an unfit leader's ask): the rounds show what the
// decisions alone make of a fleet's start, a join and a drain, that every queue keeps a leader, and
// that the fleet comes to rest.
type sim struct {
	t       *testing.T
	fake    *clock.Fake
	ids     []string
	runners map[string]*Runner
	keys    map[string]map[string]string // queue -> key -> server ID
	rev     int64
}

// newSim starts workers (server ID -> its queues) that all see each other's member records.
func newSim(t *testing.T, workers map[string][]string) *sim {
	s := &sim{t: t, fake: clock.NewFake(t0), runners: map[string]*Runner{}, keys: map[string]map[string]string{}}
	for id := range workers {
		s.ids = append(s.ids, id)
	}
	slices.Sort(s.ids)
	for _, id := range s.ids {
		r := testRunner(id, workers[id], s.ids...)
		r.cfg.Clock, r.view.clk, r.roster.clk = s.fake, s.fake, s.fake
		r.started, r.view.loadedAt = s.fake.Now(), s.fake.Now()
		s.runners[id] = r
	}
	return s
}

// put adds (id != "") or deletes a key of queue as every worker's watch sees it, and lets the workers
// whose term began or ended know.
func (s *sim) put(queue, key, id string) {
	if id != "" {
		s.rev++
		key = fmt.Sprintf("/e/p/%s/%d", queue, s.rev)
		if s.keys[queue] == nil {
			s.keys[queue] = map[string]string{}
		}
		s.keys[queue][key] = id
	} else {
		delete(s.keys[queue], key)
	}
	for _, r := range s.runners {
		r.view.apply(key, id, s.rev, id == "")
	}
	for _, r := range s.runners {
		if held := r.view.leader(queue) == r.cfg.ServerID; held != r.isHeld(queue) && slices.Contains(r.cfg.Queues, queue) {
			r.setHeld(queue, held)
		}
	}
}

// hint records a hint of queue in every worker's roster, as their watches would bring it.
func (s *sim) hint(queue string, h hint) {
	b := fmt.Sprintf(`{"to":%q,"from":%q,"reason":%q}`, h.To, h.From, h.Reason)
	for _, r := range s.runners {
		r.roster.mu.Lock()
		r.roster.apply(r.roster.hintKey(queue), []byte(b), false)
		r.roster.mu.Unlock()
	}
}

// keyOf returns id's key in queue's line, "" when it stands not.
func (s *sim) keyOf(queue, id string) string {
	for k, who := range s.keys[queue] {
		if who == id {
			return k
		}
	}
	return ""
}

// round lets every worker decide once for each of its queues, then a second passes; it returns how
// many keys were added or removed.
func (s *sim) round() int {
	moves := 0
	for _, id := range s.ids {
		r := s.runners[id]
		for _, q := range r.cfg.Queues {
			key := s.keyOf(q, id)
			switch {
			case key == "" && r.mayStand(q):
				s.put(q, "", id)
			case key == "":
				continue
			case r.view.leader(q) != id && r.shouldWithdraw(q):
				s.put(q, key, "")
			case r.view.leader(q) == id:
				asked := r.snapshot(q).unfitAsked
				reason, _ := r.heldMove(s.t.Context(), q)
				if !r.snapshot(q).unfitAsked.Equal(asked) {
					s.hint(q, hint{From: id, Reason: ReasonUnfit}) // the ask, as the watches bring it
				}
				if reason == "" {
					continue
				}
				s.put(q, key, "")
				if reason == ReasonUnfit {
					r.Fit(q) // as the hand-over does
				}
			default:
				continue
			}
			moves++
		}
	}
	s.fake.Advance(time.Second)
	return moves
}

// settle runs rounds until ten in a row move nothing (longer than Cooldown and every vacancy wait,
// so that a pause is not taken for rest), at most max, checking after each that no queue that had a
// leader lost it; it returns the rounds run.
func (s *sim) settle(max int) int {
	quiet := 0
	for n := 1; n <= max; n++ {
		led := s.leaders()
		if s.round() == 0 {
			quiet++
		} else {
			quiet = 0
		}
		for q, l := range led {
			if l != "" && s.leaders()[q] == "" {
				s.t.Fatalf("round %d: queue %s, led by %s, has no leader", n, q, l)
			}
		}
		if quiet == 10 {
			return n
		}
	}
	s.t.Fatalf("no rest after %d rounds: leading %v", max, s.leading())
	return max
}

// leaders returns each queue's leader ("" for none).
func (s *sim) leaders() map[string]string {
	out := map[string]string{}
	for _, r := range s.runners {
		for _, q := range r.cfg.Queues {
			out[q] = r.view.leader(q)
		}
	}
	return out
}

// leading returns how many queues each worker leads.
func (s *sim) leading() map[string]int {
	out := map[string]int{}
	for _, id := range s.ids {
		out[id] = s.runners[id].Leading()
	}
	return out
}

func TestSimFleetStart(t *testing.T) {
	queues := queueNames(30)
	s := newSim(t, map[string][]string{"w0": queues, "w1": queues, "w2": queues})
	rounds := s.settle(60)
	t.Logf("at rest after %d rounds: leading %v", rounds, s.leading())
	for q, l := range s.leaders() {
		if l == "" {
			t.Fatalf("queue %s has no leader at rest", q)
		}
	}
	for id, n := range s.leading() {
		if n > shedLimit(10, 1.25) {
			t.Fatalf("%s leads %d at rest, more than ceil(1.25 × 10): %v", id, n, s.leading())
		}
	}
	keys := 0
	for _, ks := range s.keys {
		keys += len(ks)
	}
	if keys != len(queues) {
		t.Fatalf("%d candidate keys at rest for %d queues: workers stand in line for nothing", keys, len(queues))
	}
}

func TestSimJoinAndDrain(t *testing.T) {
	queues := queueNames(20)
	s := newSim(t, map[string][]string{"w0": queues, "w1": queues})
	// w0 alone: w1 stands nowhere yet, and w0 leads every queue by the time w1 campaigns.
	for _, q := range queues {
		s.put(q, "", "w0")
	}
	s.fake.Advance(time.Hour) // past every Cooldown
	rounds := s.settle(120)
	t.Logf("w1 joined: at rest after %d rounds, leading %v", rounds, s.leading())
	if got := s.leading(); got["w0"] > shedLimit(10, 1.25) || got["w1"] < 20-shedLimit(10, 1.25) {
		t.Fatalf("after w1 joined: leading %v, want neither above ceil(1.25 × 10)", got)
	}
	// w0 drains: every queue goes to w1.
	for _, r := range s.runners {
		r.roster.members["w0"] = member{Draining: true}
	}
	s.runners["w0"].roster.setDraining(true)
	s.fake.Advance(time.Hour)
	rounds = s.settle(120)
	t.Logf("w0 drained: at rest after %d rounds, leading %v", rounds, s.leading())
	if got := s.leading(); got["w0"] != 0 || got["w1"] != 20 {
		t.Fatalf("after w0 drained: leading %v, want every queue on w1", got)
	}
}

// A queue that only the draining worker serves stays led by it, while the queues another worker
// serves go.
func TestSimDrainKeepsAQueueOnlyItServes(t *testing.T) {
	queues := queueNames(6)
	s := newSim(t, map[string][]string{"w0": append(slices.Clone(queues), "solo"), "w1": queues})
	s.put("solo", "", "w0")
	for _, q := range queues {
		s.put(q, "", "w0")
	}
	for _, r := range s.runners {
		r.roster.members["w0"] = member{Draining: true}
	}
	s.runners["w0"].roster.setDraining(true)
	s.fake.Advance(time.Hour)
	s.settle(60)
	if l := s.leaders()["solo"]; l != "w0" {
		t.Fatalf("solo, served by the draining w0 only: led by %q, want w0", l)
	}
	if got := s.leading(); got["w0"] != 1 || got["w1"] != len(queues) {
		t.Fatalf("leading %v, want w0 on solo only", got)
	}
	if s.runners["w0"].HandOverWaiting("solo") == "" {
		t.Fatal("HandOverWaiting does not say why solo stays")
	}
}

// publish sets id's member record in every worker's roster (version and draining), as their
// watches would bring it; a nil m removes it (the worker stopped, its lease revoked).
func (s *sim) publish(id string, m *member) {
	for _, r := range s.runners {
		r.roster.mu.Lock()
		if m == nil {
			delete(r.roster.members, id)
		} else {
			r.roster.members[id] = *m
		}
		r.roster.recompute()
		r.roster.mu.Unlock()
	}
	if r, ok := s.runners[id]; ok && m != nil {
		r.cfg.Version = m.Version
	}
}

// stop removes worker id: its keys go (each term resigned) and its record with its lease.
func (s *sim) stop(id string) {
	for q := range s.keys {
		if k := s.keyOf(q, id); k != "" {
			s.put(q, k, "")
		}
	}
	delete(s.runners, id)
	s.ids = slices.DeleteFunc(s.ids, func(x string) bool { return x == id })
	s.publish(id, nil)
}

// A rolling deploy with surge: a worker of the new version joins two of the old one, stands in line
// behind the old leaders (forward only) and takes nothing while both versions are live (no
// rebalancing during a rollout); as each old worker stops, its queues go to the new one, never to
// the other old one, so each queue moves once.
func TestSimRolloutMovesForwardOnce(t *testing.T) {
	queues := queueNames(12)
	s := newSim(t, map[string][]string{"w0": queues, "w1": queues, "w2": queues})
	s.publish("w0", &member{Version: "v1"})
	s.publish("w1", &member{Version: "v1"})
	s.publish("w2", &member{Version: "v2"}) // published, not started: see below
	for i, q := range queues {
		s.put(q, "", []string{"w0", "w1"}[i%2])
	}
	s.fake.Advance(time.Hour)
	s.settle(60)
	if got := s.leading(); got["w0"] != 6 || got["w1"] != 6 || got["w2"] != 0 {
		t.Fatalf("during the rollout: leading %v, want 6, 6 and 0 (no rebalancing)", got)
	}
	for _, q := range queues {
		if line := s.runners["w2"].view.line(q); len(line) != 2 || line[1] != "w2" {
			t.Fatalf("queue %s: line %v, want the new version second, ready to take over", q, line)
		}
	}
	moves := map[string]int{}
	before := s.leaders()
	for _, old := range []string{"w0", "w1"} {
		s.stop(old)
		s.settle(60)
		after := s.leaders()
		for q, l := range after {
			if l != before[q] {
				moves[q]++
				if l != "w2" {
					t.Fatalf("%s stopped: queue %s went to %q, want the new version", old, q, l)
				}
			}
		}
		before = after
	}
	for _, q := range queues {
		if moves[q] != 1 {
			t.Fatalf("queue %s moved %d times, want once (moves %v)", q, moves[q], moves)
		}
	}
}

// A worker dies: its keys go with its session's lease while its member record, on a lease of its
// own, lingers. Its queues fall vacant together, and in the very next round each gets exactly one
// candidate, the first-ranked of the live workers (the dead one, gone from the view, ranks nowhere):
// one candidacy per queue, not one per worker.
func TestSimDeadWorkersQueuesGetOneCandidateEach(t *testing.T) {
	queues := queueNames(30)
	s := newSim(t, map[string][]string{"w0": queues, "w1": queues, "w2": queues})
	s.settle(60)
	var orphans []string
	for q, l := range s.leaders() {
		if l == "w2" {
			orphans = append(orphans, q)
		}
	}
	if len(orphans) == 0 {
		t.Fatal("w2 leads nothing: the case is not exercised")
	}
	for _, q := range orphans {
		s.put(q, s.keyOf(q, "w2"), "")
	}
	delete(s.runners, "w2")
	s.ids = slices.DeleteFunc(s.ids, func(id string) bool { return id == "w2" })
	s.round()
	for _, q := range orphans {
		if n := len(s.keys[q]); n != 1 {
			t.Fatalf("queue %s, vacant since w2 died: %d candidates after one round, want exactly one (keys %v)", q, n, s.keys[q])
		}
	}
	s.settle(60)
	for q, l := range s.leaders() {
		if l == "" || l == "w2" {
			t.Fatalf("queue %s led by %q at rest", q, l)
		}
	}
	t.Logf("%d queues of the dead worker: one candidate each at once; at rest leading %v", len(orphans), s.leading())
}

// An unfit leader asks the workers that serve its queue to stand, and hands the queue over to the one
// that does; a queue no other worker serves stays with it.
func TestSimUnfitHandsOverToAWorkerThatServes(t *testing.T) {
	queues := []string{"a", "b", "c", "d"}
	s := newSim(t, map[string][]string{"w0": append(slices.Clone(queues), "solo"), "w1": queues})
	for i, q := range append(slices.Clone(queues), "solo") {
		s.put(q, "", []string{"w0", "w0", "w1", "w1", "w0"}[i])
	}
	s.fake.Advance(time.Hour)
	s.settle(60)
	s.runners["w0"].Unfit("a")
	s.runners["w0"].Unfit("solo")
	s.settle(60)
	if got := s.leaders(); got["a"] != "w1" || got["solo"] != "w0" {
		t.Fatalf("after w0 became unfit for a and solo: a led by %q, solo by %q; want w1 and w0 (leaders %v)", got["a"], got["solo"], got)
	}
	if rec := s.runners["w0"].snapshot("a"); rec.unfit || rec.unfitMoved.IsZero() {
		t.Fatalf("a handed over as unfit: record %+v, want the mark ended and the move's time kept", rec)
	}
}

// During a Temporal outage every worker is unfit: an unfit leader keeps its queue, says why, and
// hands it over once a worker that serves it reports that it reaches Temporal again.
func TestSimUnfitKeepsTheQueueWhileNobodyReachesTemporal(t *testing.T) {
	queues := []string{"a", "b"}
	s := newSim(t, map[string][]string{"w0": queues, "w1": queues})
	s.put("a", "", "w0")
	s.put("b", "", "w1")
	s.fake.Advance(time.Hour)
	s.settle(60)
	for _, id := range []string{"w0", "w1"} {
		s.publish(id, &member{}) // neither reaches Temporal
	}
	for _, id := range []string{"w0", "w1"} {
		for _, q := range queues {
			s.runners[id].Unfit(q)
		}
	}
	for n := range 30 { // asks renewed every Grace, pauses and cooldowns passed
		s.round()
		if got := s.leaders(); got["a"] != "w0" || got["b"] != "w1" {
			t.Fatalf("outage, round %d: leaders %v, want a on w0 and b on w1 (no queue moves to a worker that cannot reach Temporal)", n, got)
		}
	}
	if s.runners["w0"].HandOverWaiting("a") == "" {
		t.Fatal("HandOverWaiting does not say why a stays on w0")
	}
	s.publish("w1", &member{TemporalOK: true}) // only w0 still cannot reach it
	for n := 0; s.leaders()["a"] != "w1"; n++ {
		if n == 10 {
			t.Fatalf("w1 reaches Temporal again: leaders %v after %d rounds, want a on w1", s.leaders(), n)
		}
		s.round()
	}
	if rec := s.runners["w0"].snapshot("a"); rec.unfitMoved.IsZero() {
		t.Fatalf("a moved to w1, but not as unfit: w0's record %+v", rec)
	}
}

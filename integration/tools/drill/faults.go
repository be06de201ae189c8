package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// Fault is one injected fault: a kind, a target and its steps.
type Fault struct {
	N       int       `json:"n"`
	Kind    Kind      `json:"kind"`
	Target  string    `json:"target"`
	Started time.Time `json:"started"`
	Ended   time.Time `json:"ended"`
	Steps   []*Step   `json:"steps"`
	Notes   []string  `json:"notes,omitempty"`
	// CleanupLatency is, for an orphan fault, the time from the kill until the orphan's run was
	// closed and its heartbeat key deleted.
	CleanupLatency time.Duration `json:"cleanup_latency_ns,omitempty"`

	// Filled in by Analyze.
	Affected   []string        `json:"affected_queues"`
	NewRuns    int             `json:"new_runs"`
	Rebalanced int             `json:"rebalanced_runs"`
	Latencies  []time.Duration `json:"takeover_latencies_ns"`
	Violations int             `json:"violations"`
}

// Step is one injection instant of a fault. Its window runs from At to the next step's At: the
// terms that start in it, and their runs, are the step's consequences.
type Step struct {
	Fault   *Fault        `json:"-"`
	Name    string        `json:"name"`
	At      time.Time     `json:"at"`
	End     time.Time     `json:"end"`
	Settled time.Duration `json:"settled_ns"` // from At until the fleet was first seen settled again
	// Recovery marks a step that ends a fault or brings a worker (back): its handovers are the
	// fleet rebalancing, counted as changes but not as takeover latencies.
	Recovery bool `json:"recovery,omitempty"`
	// Changes lists, per queue whose leadership changed in the window, its new terms and runs.
	Changes []QueueChange `json:"changes,omitempty"`
}

// QueueChange is what one step did to one queue.
type QueueChange struct {
	Queue   string        `json:"queue"`
	From    string        `json:"from,omitempty"` // the server that led before the window
	Terms   []string      `json:"terms"`          // server@token of each term started in the window
	Runs    []string      `json:"runs"`           // run IDs started by those terms
	Latency time.Duration `json:"latency_ns"`     // step instant -> first new run's start (Temporal's record)
	// Rebalanced counts the runs started after a balance handover (package balance), not by the fault.
	Rebalanced int `json:"rebalanced,omitempty"`
}

// newFault starts a fault and logs it as "fault #n: <format, args>".
func (d *Drill) newFault(kind Kind, target, format string, args ...any) *Fault {
	d.mu.Lock()
	f := &Fault{N: len(d.faults) + 1, Kind: kind, Target: target, Started: time.Now()}
	d.faults = append(d.faults, f)
	d.mu.Unlock()
	d.logf("fault #%d: %s", f.N, fmt.Sprintf(format, args...))
	return f
}

// count is how many faults of kind k the drill has started so far.
func (d *Drill) count(k Kind) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := 0
	for _, f := range d.faults {
		if f.Kind == k {
			n++
		}
	}
	return n
}

// leaderFault starts a fault of kind k aimed at one of the live slot workers that lead queues (any
// live slot worker if none does), picked with the drill's random source, and logs it as
// "<verb> <worker> (leads n queues)<more>".
func (d *Drill) leaderFault(k Kind, verb, more string) (*proc, *Fault, error) {
	counts := map[*proc]int{} // from the latest samples
	var cands []*proc
	for _, p := range d.liveProcs(nil) {
		if s, ok := p.lastSample(); ok && leading(s.St) > 0 {
			counts[p] = leading(s.St)
			cands = append(cands, p)
		}
	}
	if len(cands) == 0 {
		cands = d.liveProcs(nil)
	}
	if len(cands) == 0 {
		return nil, nil, errors.New("no live worker")
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].id < cands[j].id })
	p := cands[d.rng.IntN(len(cands))]
	return p, d.newFault(k, p.id, "%s %s (leads %d queues)%s", verb, p.id, counts[p], more), nil
}

// step records an injection instant; call it right before the injection.
func (d *Drill) step(f *Fault, name string) *Step {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &Step{Fault: f, Name: name, At: time.Now()}
	switch {
	case name == "restart" && (f.Kind == KindSIGKILL || f.Kind == KindSIGTERM), name == "resume", name == "heal", strings.HasPrefix(name, "start"):
		s.Recovery = true
	}
	f.Steps = append(f.Steps, s)
	d.steps = append(d.steps, s)
	return s
}

// faultPhase injects faults one at a time, kinds in a seeded order per cycle, until Duration has
// passed (a fault started is finished) or Cycles rounds are done.
func (d *Drill) faultPhase(ctx context.Context) {
	d.monitoring.Store(true)
	defer d.monitoring.Store(false)
	if len(d.kinds) == 0 {
		d.logf("no fault kind can run here")
		return
	}
	end := time.Now().Add(d.cfg.Duration)
	for cycle := 1; d.cfg.Cycles <= 0 || cycle <= d.cfg.Cycles; cycle++ {
		order := slices.Clone(d.kinds)
		d.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
		for _, k := range order {
			if ctx.Err() != nil || time.Now().After(end) {
				return
			}
			d.inject(ctx, k)
			if !sleepCtx(ctx, d.cfg.Settle) {
				return
			}
		}
	}
}

func (d *Drill) inject(ctx context.Context, k Kind) {
	d.mu.Lock()
	before := len(d.faults)
	d.mu.Unlock()
	var err error
	switch k {
	case KindSIGKILL, KindSIGTERM:
		err = d.faultRestart(ctx, k)
	case KindSIGSTOP:
		err = d.faultSIGSTOP(ctx)
	case KindPartition:
		err = d.faultPartition(ctx)
	case KindRolling:
		err = d.faultRolling(ctx)
	case KindEtcdMember:
		err = d.faultEtcdMember(ctx)
	case KindRedisRestart:
		err = d.faultServer(ctx, k, "redis-server", d.redis.Stop, d.redis.Kill, func(context.Context) error { return d.redis.Restart() })
	case KindTemporalRestart:
		err = d.faultServer(ctx, k, "temporal", d.temporal.Stop, d.temporal.Kill, func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			return d.temporal.Restart(ctx)
		})
	case KindOrphan:
		err = d.faultOrphan(ctx)
	}
	// A fault that failed before it recorded itself (no live worker to pick, say) has no record to
	// end: the last one is an earlier fault's.
	d.mu.Lock()
	var f *Fault
	if n := len(d.faults); n > before {
		f = d.faults[n-1]
		f.Ended = time.Now()
	}
	d.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		// The drill could not do what the fault needs (a server that does not come back, a worker
		// that does not start): that is a finding too.
		d.violate(Violation{Check: CheckFaultFailed, At: time.Now(), Detail: fmt.Sprintf("%s: %v", k, err)})
	}
	if f != nil {
		var steps []string
		for _, s := range f.Steps {
			steps = append(steps, s.Name)
		}
		d.logf("fault #%d %s done in %v (steps: %s)", f.N, f.Kind, f.Ended.Sub(f.Started).Round(100*time.Millisecond), strings.Join(steps, ", "))
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool { return clock.Sleep(ctx, clock.Real(), d) }

// restartDelay is how long a killed worker stays away before its new incarnation starts.
const restartDelay = 2 * time.Second

// cycle is the shape of most faults: a step named down and inject, which returns the instant the
// fault took hold; a wait for the fleet (but for except) to settle; the fault kept in place for hold
// after that instant and another wait to settle; then a step named up, recover, and a wait for the
// whole fleet to settle. A fault's consequences can come late (a session that lost its keepalives
// to an etcd leader election ends its terms at its lease deadline, and its keys stay until the new
// raft leader expires its lease), and they must land in the window of the step that caused them.
func (d *Drill) cycle(ctx context.Context, f *Fault, down string, except *proc, inject func() (time.Time, error),
	hold time.Duration, up string, recover func() error) error {
	s := d.step(f, down)
	at, err := inject()
	if err != nil {
		return err
	}
	d.waitSteady(ctx, s, except, d.cfg.TakeoverSLA)
	if hold > 0 && sleepCtx(ctx, time.Until(at.Add(hold))) {
		d.waitSteady(ctx, s, except, d.cfg.TakeoverSLA)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s = d.step(f, up)
	if err := recover(); err != nil {
		return err
	}
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

// faultRestart stops a leader -- with SIGKILL, or with SIGTERM, a clean stop after which it must
// have handed its queues over (drained its Temporal workers, resigned) and exited 0 -- and later
// starts a new incarnation in its slot.
func (d *Drill) faultRestart(ctx context.Context, kind Kind) error {
	p, f, err := d.leaderFault(kind, strings.ToUpper(string(kind)), "")
	if err != nil {
		return err
	}
	down, stop := "kill", func() (time.Time, error) { return p.send(syscall.SIGKILL), nil }
	if kind == KindSIGTERM {
		down, stop = "sigterm", func() (time.Time, error) {
			if err := d.stopClean(ctx, p); err != nil {
				return time.Time{}, err
			}
			p.mu.Lock()
			defer p.mu.Unlock()
			f.Notes = append(f.Notes, fmt.Sprintf("exited %v after SIGTERM", p.exitedAt.Sub(p.termAt).Round(time.Millisecond)))
			return p.exitedAt, nil
		}
	}
	return d.cycle(ctx, f, down, p, stop, restartDelay, "restart", func() error {
		np, err := d.startSlot(ctx, p.slot)
		if err == nil {
			f.Notes = append(f.Notes, "restarted as "+np.id)
		}
		return err
	})
}

// stopClean sends p SIGTERM and waits for it to exit (unclean-stop).
func (d *Drill) stopClean(ctx context.Context, p *proc) error {
	p.send(syscall.SIGTERM)
	return d.waitStopped(ctx, p)
}

// waitStopped waits for p, sent SIGTERM, to exit: with code 0 and within 30 s, or it is an
// unclean stop (and p is killed). report ties the violation to the fault it happened in.
func (d *Drill) waitStopped(ctx context.Context, p *proc) error {
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		d.violate(Violation{Check: CheckUncleanStop, At: time.Now(), Detail: p.id + " did not exit 30s after SIGTERM"})
		p.send(syscall.SIGKILL)
		<-p.done
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	code, took := p.Code(), p.exitedAt.Sub(p.termAt)
	p.mu.Unlock()
	if code != 0 {
		d.violate(Violation{Check: CheckUncleanStop, At: time.Now(), Detail: fmt.Sprintf(
			"%s exited with code %d after SIGTERM (took %v): %s", p.id, code, took.Round(time.Millisecond), p.Tail(600))})
	}
	return nil
}

func (d *Drill) faultSIGSTOP(ctx context.Context) error {
	p, f, err := d.leaderFault(KindSIGSTOP, "SIGSTOP", " for longer than the TTL")
	if err != nil {
		return err
	}
	var stoppedAt time.Time
	stop := func() (time.Time, error) {
		stoppedAt = p.send(syscall.SIGSTOP)
		return stoppedAt, nil
	}
	return d.cycle(ctx, f, "stop", p, stop, d.cfg.TTL+time.Second, "resume", func() error {
		resumed := p.send(syscall.SIGCONT)
		f.Notes = append(f.Notes, fmt.Sprintf("stopped %v", resumed.Sub(stoppedAt).Round(time.Millisecond)))
		// The resumed process must not act for the terms it held when it was stopped; the logs are
		// checked afterwards (analyze), /status here: it must not report leading for an old term.
		old := map[int64]bool{}
		for _, e := range p.snapshotEvents() {
			if e.Kind == event.TermStarted && e.At.Before(stoppedAt) {
				old[e.Token] = true
			}
		}
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
			st, _ := workerproc.Status(p.Addr)
			for _, q := range st.Queues {
				if q.Leading && old[q.Token] {
					d.violate(Violation{Check: CheckStoppedActed, Fault: f.N, Queue: q.Queue, At: time.Now(), Detail: fmt.Sprintf(
						"%s reports leading %s for token %d, a term it held when it was SIGSTOPped, after SIGCONT", p.id, q.Queue, q.Token)})
				}
			}
			if !sleepCtx(ctx, 100*time.Millisecond) {
				return ctx.Err()
			}
		}
		return nil
	})
}

func (d *Drill) faultPartition(ctx context.Context) error {
	p, f, err := d.leaderFault(KindPartition, "partition", " from etcd")
	if err != nil {
		return err
	}
	cut := func() (time.Time, error) {
		for _, px := range d.proxies[p.slot] {
			px.Blackhole()
		}
		at := time.Now()
		// Settled means the partitioned worker has let go of everything (its watchdog ends its terms
		// at its lease deadline minus the safety margin) and the others took over.
		_ = harness.Poll(ctx, d.cfg.TakeoverSLA, 50*time.Millisecond, func() error {
			if st, ok := workerproc.Status(p.Addr); ok && leading(st) > 0 {
				return errors.New("still leads")
			}
			return nil
		})
		return at, nil
	}
	return d.cycle(ctx, f, "partition", nil, cut, d.cfg.TTL+time.Second, "heal", func() error {
		for _, px := range d.proxies[p.slot] {
			px.Heal()
		}
		if err := p.WaitReady(ctx, 30*time.Second); err != nil {
			return fmt.Errorf("after the partition healed: %w", err)
		}
		return nil
	})
}

// faultRolling stops every worker in turn with SIGTERM and starts its next incarnation.
func (d *Drill) faultRolling(ctx context.Context) error {
	f := d.newFault(KindRolling, "all workers", "rolling restart (SIGTERM) of all %d workers", d.cfg.Workers)
	for i := range d.cfg.Workers {
		ps := d.incarnations(i)
		p := ps[len(ps)-1]
		if !p.alive() {
			continue
		}
		stop := func() (time.Time, error) { return time.Now(), d.stopClean(ctx, p) }
		if err := d.cycle(ctx, f, "sigterm "+p.id, p, stop, 0, fmt.Sprintf("start w%d-%d", i+1, len(ps)), func() error {
			_, err := d.startSlot(ctx, i)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

func (d *Drill) faultEtcdMember(ctx context.Context) error {
	leader := d.etcd.Leader()
	victim, what := leader, "raft leader"
	if d.count(KindEtcdMember)%2 == 1 || leader < 0 {
		var followers []int
		for i := range d.etcd.Size() {
			if i != leader {
				followers = append(followers, i)
			}
		}
		victim, what = followers[d.rng.IntN(len(followers))], "follower"
	}
	f := d.newFault(KindEtcdMember, fmt.Sprintf("member %d (%s)", victim, what), "kill etcd member %d (%s)", victim, what)
	kill := func() (time.Time, error) {
		err := d.etcd.StopMember(victim)
		return time.Now(), err
	}
	// Terms lost to the raft election end at the workers' lease deadlines, and the successors wait
	// for the old leases to expire on the new raft leader: hold long enough for both.
	return d.cycle(ctx, f, "kill", nil, kill, 2*d.cfg.TTL+2*time.Second, "restart", func() error {
		if err := d.etcd.RestartMember(victim); err != nil {
			return err
		}
		_, err := d.etcd.WaitLeader(30 * time.Second)
		return err
	})
}

// faultServer restarts a server: every other time it crashes (kill), else it stops cleanly (stop,
// SIGTERM), and it comes back (start) a second later on its address with its data.
func (d *Drill) faultServer(ctx context.Context, kind Kind, name string, stop, kill func() error, start func(context.Context) error) error {
	crash, how := d.count(kind)%2 == 1, "SIGTERM"
	if crash {
		stop, how = kill, "SIGKILL"
	}
	f := d.newFault(kind, name+" ("+how+")", "restart %s (%s, 1s down)", name, how)
	s := d.step(f, "restart")
	if err := stop(); err != nil {
		return err
	}
	if !sleepCtx(ctx, time.Second) {
		return ctx.Err()
	}
	if err := start(ctx); err != nil {
		return err
	}
	f.Notes = append(f.Notes, fmt.Sprintf("down %v", time.Since(s.At).Round(time.Millisecond)))
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

// faultOrphan crashes a worker that is the only candidate of a queue of its own: nobody takes its
// dispatcher over, so its run and heartbeat key stay behind until the reconciler leader (another
// worker) finds the key stale, terminates exactly that run and deletes the key. It must be done
// within CleanupSLA of the crash.
func (d *Drill) faultOrphan(ctx context.Context) error {
	queue := fmt.Sprintf("solo%d", d.count(KindOrphan)+1)
	f := d.newFault(KindOrphan, queue+"-0", "crash of the only worker of queue %s (the reconciler must clean up)", queue)
	d.step(f, "start")
	// It takes no part in the reconciler election: the crash must leave the cleanup to another worker.
	p, err := d.startProc(ctx, -1, f.Target, []string{queue}, d.etcd.Endpoints(), "BATON_RECONCILE_DISABLED=true")
	if err != nil {
		return err
	}
	id := d.workflowID(queue)
	var runID string
	err = harness.Poll(ctx, d.cfg.TakeoverSLA, 100*time.Millisecond, func() error {
		st, _ := workerproc.Status(p.Addr)
		q, ok := workerproc.Leading(st, queue)
		if !ok {
			return errors.New("no dispatcher run")
		}
		if h, _ := d.heartbeat(ctx, id); h[heartbeat.FieldRunID] != q.RunID {
			return fmt.Errorf("run %s has no heartbeat", q.RunID)
		}
		runID = q.RunID
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s did not lead %s with a run and a heartbeat: %w", p.id, queue, err)
	}
	d.step(f, "kill")
	killed := p.send(syscall.SIGKILL)
	err = harness.Poll(ctx, d.cfg.CleanupSLA, 250*time.Millisecond, func() error {
		r, derr := d.describe(ctx, id, runID)
		closed := derr == nil && !r.open()
		h, kerr := d.heartbeat(ctx, id)
		if closed && kerr == nil && len(h) == 0 {
			return nil
		}
		return fmt.Errorf("run %s closed=%v, heartbeat key present=%v", runID, closed, len(h) > 0)
	})
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		d.violate(Violation{Check: CheckOrphanCleanup, Fault: f.N, Queue: queue, At: time.Now(), Detail: fmt.Sprintf(
			"after the crash of %s: %v", p.id, err)})
	default:
		f.CleanupLatency = time.Since(killed)
		f.Notes = append(f.Notes, fmt.Sprintf("orphan run %s and its heartbeat key cleaned %v after the crash", runID[max(0, len(runID)-8):], f.CleanupLatency.Round(100*time.Millisecond)))
	}
	return nil
}

package drill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/baton-run/baton/heartbeat"
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
	// Owners is the settled state after the step.
	Owners map[string]owner `json:"-"`
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

func (d *Drill) newFault(kind Kind, target string) *Fault {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := &Fault{N: len(d.faults) + 1, Kind: kind, Target: target, Started: time.Now()}
	d.faults = append(d.faults, f)
	return f
}

// step records an injection instant. Call it right before (or, for instants the injection itself
// returns, right after) the injection.
func (d *Drill) step(f *Fault, name string, at time.Time) *Step {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &Step{Fault: f, Name: name, At: at}
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
	d.setMonitoring(true)
	defer d.setMonitoring(false)
	var kinds []Kind
	for _, k := range d.cfg.Kinds {
		if !slices.ContainsFunc(d.skipped, func(s string) bool { return strings.HasPrefix(s, string(k)+":") }) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		d.logf("no fault kind can run here")
		return
	}
	end := time.Now().Add(d.cfg.Duration)
	for cycle := 1; d.cfg.Cycles <= 0 || cycle <= d.cfg.Cycles; cycle++ {
		order := slices.Clone(kinds)
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
	var err error
	switch k {
	case KindSIGKILL:
		err = d.faultSIGKILL(ctx)
	case KindSIGTERM:
		err = d.faultSIGTERM(ctx)
	case KindSIGSTOP:
		err = d.faultSIGSTOP(ctx)
	case KindPartition:
		err = d.faultPartition(ctx)
	case KindRolling:
		err = d.faultRolling(ctx)
	case KindEtcdMember:
		err = d.faultEtcdMember(ctx)
	case KindRedisRestart:
		err = d.faultRedis(ctx)
	case KindTemporalRestart:
		err = d.faultTemporal(ctx)
	case KindOrphan:
		err = d.faultOrphan(ctx)
	}
	d.mu.Lock()
	var f *Fault
	if n := len(d.faults); n > 0 {
		f = d.faults[n-1]
		f.Ended = time.Now()
	}
	d.mu.Unlock()
	if err != nil && ctx.Err() == nil {
		// The drill could not do what the fault needs (a server that does not come back, a worker
		// that does not start): that is a finding too.
		d.violate(Violation{Check: CheckFaultFailed, At: time.Now(), Fault: faultN(f), Detail: fmt.Sprintf("%s: %v", k, err)})
	}
	if f != nil {
		var steps []string
		for _, s := range f.Steps {
			steps = append(steps, s.Name)
		}
		d.logf("fault #%d %s done in %v (steps: %s)", f.N, f.Kind, f.Ended.Sub(f.Started).Round(100*time.Millisecond), strings.Join(steps, ", "))
	}
}

func faultN(f *Fault) int {
	if f == nil {
		return 0
	}
	return f.N
}

// restartDelay is how long a killed worker stays away before its new incarnation starts.
const restartDelay = 2 * time.Second

// holdUntil keeps a fault in place until t, then waits for the fleet to settle again before the
// caller's next step: a fault's consequences can come late (a session that lost its keepalives to
// an etcd leader election ends its terms at its lease deadline, and its keys stay until the new
// raft leader expires its lease), and they must land in the window of the step that caused them.
func (d *Drill) holdUntil(ctx context.Context, s *Step, exclude map[*proc]bool, t time.Time) bool {
	if !sleepCtx(ctx, time.Until(t)) {
		return false
	}
	d.waitSteady(ctx, s, exclude, d.cfg.TakeoverSLA)
	return ctx.Err() == nil
}

func (d *Drill) faultSIGKILL(ctx context.Context) error {
	p := d.pickLeader()
	if p == nil {
		return errors.New("no live worker")
	}
	f := d.newFault(KindSIGKILL, p.id)
	d.logf("fault #%d: SIGKILL %s (leads %d queues)", f.N, p.id, d.leadCounts()[p])
	s := d.step(f, "kill", time.Now())
	killed := p.kill()
	d.waitSteady(ctx, s, map[*proc]bool{p: true}, d.cfg.TakeoverSLA)
	if !d.holdUntil(ctx, s, map[*proc]bool{p: true}, killed.Add(restartDelay)) {
		return ctx.Err()
	}
	s = d.step(f, "restart", time.Now())
	np, err := d.startSlot(ctx, p.slot)
	if err != nil {
		return err
	}
	f.Notes = append(f.Notes, "restarted as "+np.id)
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

// faultSIGTERM stops a leader cleanly: it must hand its queues over (drain its Temporal workers,
// resign) and exit 0; later a new incarnation starts.
func (d *Drill) faultSIGTERM(ctx context.Context) error {
	p := d.pickLeader()
	if p == nil {
		return errors.New("no live worker")
	}
	f := d.newFault(KindSIGTERM, p.id)
	d.logf("fault #%d: SIGTERM %s (leads %d queues)", f.N, p.id, d.leadCounts()[p])
	s := d.step(f, "sigterm", time.Now())
	p.term()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		d.violate(Violation{Check: CheckUncleanStop, Fault: f.N, At: time.Now(), Detail: p.id + " did not exit 30s after SIGTERM"})
		p.kill()
	case <-ctx.Done():
		return ctx.Err()
	}
	p.mu.Lock()
	code, exited, took := p.code, p.exitedAt, p.exitedAt.Sub(p.termAt)
	p.mu.Unlock()
	if code != 0 {
		d.violate(Violation{Check: CheckUncleanStop, Fault: f.N, At: time.Now(), Detail: fmt.Sprintf(
			"%s exited with code %d after SIGTERM (took %v): %s", p.id, code, took.Round(time.Millisecond), tailFile(p.logPath, 600))})
	}
	f.Notes = append(f.Notes, fmt.Sprintf("exited %v after SIGTERM", took.Round(time.Millisecond)))
	d.waitSteady(ctx, s, map[*proc]bool{p: true}, d.cfg.TakeoverSLA)
	if !d.holdUntil(ctx, s, map[*proc]bool{p: true}, exited.Add(restartDelay)) {
		return ctx.Err()
	}
	s = d.step(f, "restart", time.Now())
	np, err := d.startSlot(ctx, p.slot)
	if err != nil {
		return err
	}
	f.Notes = append(f.Notes, "restarted as "+np.id)
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

func (d *Drill) faultSIGSTOP(ctx context.Context) error {
	p := d.pickLeader()
	if p == nil {
		return errors.New("no live worker")
	}
	f := d.newFault(KindSIGSTOP, p.id)
	d.logf("fault #%d: SIGSTOP %s (leads %d queues) for longer than the TTL", f.N, p.id, d.leadCounts()[p])
	s := d.step(f, "stop", time.Now())
	stoppedAt := p.stop()
	d.waitSteady(ctx, s, map[*proc]bool{p: true}, d.cfg.TakeoverSLA)
	if !d.holdUntil(ctx, s, map[*proc]bool{p: true}, stoppedAt.Add(d.cfg.TTL+time.Second)) {
		p.cont()
		return ctx.Err()
	}
	s = d.step(f, "resume", time.Now())
	resumed := p.cont()
	f.Notes = append(f.Notes, fmt.Sprintf("stopped %v", resumed.Sub(stoppedAt).Round(time.Millisecond)))
	// The resumed process must not act for the terms it held when it was stopped; the logs are
	// checked afterwards (Analyze), /status here: it must not report leading for an old term.
	old := map[int64]bool{}
	for _, e := range p.snapshotEvents() {
		if e.Msg == msgTermStarted && e.TS.Before(stoppedAt) {
			old[e.Token] = true
		}
	}
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if st, ok := status(p.addr); ok {
			for _, q := range st.Queues {
				if q.Leading && old[q.Token] {
					d.violate(Violation{Check: CheckStoppedActed, Fault: f.N, Queue: q.Queue, At: time.Now(), Detail: fmt.Sprintf(
						"%s reports leading %s for token %d, a term it held when it was SIGSTOPped, after SIGCONT", p.id, q.Queue, q.Token)})
				}
			}
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

func (d *Drill) faultPartition(ctx context.Context) error {
	p := d.pickLeader()
	if p == nil {
		return errors.New("no live worker")
	}
	f := d.newFault(KindPartition, p.id)
	d.logf("fault #%d: partition %s (leads %d queues) from etcd", f.N, p.id, d.leadCounts()[p])
	s := d.step(f, "partition", time.Now())
	for _, px := range d.proxies[p.slot] {
		px.Blackhole()
	}
	cut := time.Now()
	// Settled means the partitioned worker has let go of everything (its watchdog ends its terms at
	// its lease deadline minus the safety margin) and the others took over.
	for deadline := cut.Add(d.cfg.TakeoverSLA); d.leadCount(p) > 0 && time.Now().Before(deadline); {
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	if !d.holdUntil(ctx, s, nil, cut.Add(d.cfg.TTL+time.Second)) {
		return ctx.Err()
	}
	s = d.step(f, "heal", time.Now())
	for _, px := range d.proxies[p.slot] {
		px.Heal()
	}
	deadline := time.Now().Add(30 * time.Second)
	for !readyz(p.addr) {
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready 30s after the partition healed", p.id)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

func (d *Drill) faultRolling(ctx context.Context) error {
	f := d.newFault(KindRolling, "all workers")
	d.logf("fault #%d: rolling restart (SIGTERM) of all %d workers", f.N, d.cfg.Workers)
	for i := range d.cfg.Workers {
		d.mu.Lock()
		p := d.slots[i]
		d.mu.Unlock()
		if p == nil || !p.alive() {
			continue
		}
		s := d.step(f, "sigterm "+p.id, time.Now())
		p.term()
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			d.violate(Violation{Check: CheckUncleanStop, Fault: f.N, At: time.Now(), Detail: p.id + " did not exit 30s after SIGTERM"})
			p.kill()
		case <-ctx.Done():
			return ctx.Err()
		}
		p.mu.Lock()
		code, took := p.code, p.exitedAt.Sub(p.termAt)
		p.mu.Unlock()
		if code != 0 {
			d.violate(Violation{Check: CheckUncleanStop, Fault: f.N, At: time.Now(), Detail: fmt.Sprintf(
				"%s exited with code %d after SIGTERM (took %v): %s", p.id, code, took.Round(time.Millisecond), tailFile(p.logPath, 600))})
		}
		d.waitSteady(ctx, s, map[*proc]bool{p: true}, d.cfg.TakeoverSLA)
		s = d.step(f, fmt.Sprintf("start w%d-%d", i+1, d.nextGen(i)), time.Now())
		if _, err := d.startSlot(ctx, i); err != nil {
			return err
		}
		d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	}
	return nil
}

func (d *Drill) faultEtcdMember(ctx context.Context) error {
	leader := d.etcd.Leader()
	d.mu.Lock()
	n := d.etcdKills
	d.etcdKills++
	d.mu.Unlock()
	victim, what := leader, "raft leader"
	if n%2 == 1 || leader < 0 {
		var followers []int
		for i := range d.etcd.Size() {
			if i != leader {
				followers = append(followers, i)
			}
		}
		victim, what = followers[d.rng.IntN(len(followers))], "follower"
	}
	f := d.newFault(KindEtcdMember, fmt.Sprintf("member %d (%s)", victim, what))
	d.logf("fault #%d: kill etcd member %d (%s)", f.N, victim, what)
	s := d.step(f, "kill", time.Now())
	if err := d.etcd.StopMember(victim); err != nil {
		return err
	}
	killed := time.Now()
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	// Terms lost to the raft election end at the workers' lease deadlines, and the successors wait
	// for the old leases to expire on the new raft leader: hold long enough for both.
	if !d.holdUntil(ctx, s, nil, killed.Add(2*d.cfg.TTL+2*time.Second)) {
		return ctx.Err()
	}
	s = d.step(f, "restart", time.Now())
	if err := d.etcd.RestartMember(victim); err != nil {
		return err
	}
	if _, err := d.etcd.WaitLeader(30 * time.Second); err != nil {
		return err
	}
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

func (d *Drill) faultRedis(ctx context.Context) error {
	crash, how := d.alternate(&d.redisN)
	f := d.newFault(KindRedisRestart, "redis-server ("+how+")")
	d.logf("fault #%d: restart redis-server (%s, 1s down)", f.N, how)
	s := d.step(f, "restart", time.Now())
	var err error
	if crash {
		err = d.redis.Kill()
	} else {
		err = d.redis.Stop()
	}
	if err != nil {
		return err
	}
	if !sleepCtx(ctx, time.Second) {
		return ctx.Err()
	}
	if err := d.redis.Restart(); err != nil {
		return err
	}
	f.Notes = append(f.Notes, fmt.Sprintf("down %v", time.Since(s.At).Round(time.Millisecond)))
	d.waitSteady(ctx, s, nil, d.cfg.TakeoverSLA)
	return nil
}

func (d *Drill) faultTemporal(ctx context.Context) error {
	crash, how := d.alternate(&d.temporalN)
	f := d.newFault(KindTemporalRestart, "temporal ("+how+")")
	d.logf("fault #%d: restart the Temporal server (%s, 1s down)", f.N, how)
	s := d.step(f, "restart", time.Now())
	if err := d.temporal.restart(ctx, crash, time.Second, 90*time.Second); err != nil {
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
	d.mu.Lock()
	d.soloN++
	n := d.soloN
	d.mu.Unlock()
	queue := fmt.Sprintf("solo%d", n)
	f := d.newFault(KindOrphan, "solo"+fmt.Sprint(n)+"-0")
	d.logf("fault #%d: crash of the only worker of queue %s (the reconciler must clean up)", f.N, queue)
	d.step(f, "start", time.Now())
	// It takes no part in the reconciler election: the crash must leave the cleanup to another worker.
	p, err := d.startProc(ctx, -1, f.Target, []string{queue}, d.etcd.Endpoints(), "BATON_RECONCILE_DISABLED=true")
	if err != nil {
		return err
	}
	id := d.workflowID(queue)
	var runID string
	deadline := time.Now().Add(d.cfg.TakeoverSLA)
	for runID == "" {
		if st, ok := status(p.addr); ok {
			for _, q := range st.Queues {
				if q.Queue == queue && q.Leading && q.RunID != "" {
					h, _ := d.rdb.HGetAll(ctx, heartbeat.DefaultPrefix+id).Result()
					if h[heartbeat.FieldRunID] == q.RunID {
						runID = q.RunID
					}
				}
			}
		}
		if runID != "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not lead %s with a run and a heartbeat within %v", p.id, queue, d.cfg.TakeoverSLA)
		}
		if !sleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	d.step(f, "kill", time.Now())
	killed := p.kill()
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		resp, derr := d.tc.DescribeWorkflowExecution(cctx, id, runID)
		cancel()
		var nf *serviceerror.NotFound
		closed := (derr == nil && resp.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING) || errors.As(derr, &nf)
		cctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		n, kerr := d.rdb.Exists(cctx, heartbeat.DefaultPrefix+id).Result()
		cancel()
		if closed && kerr == nil && n == 0 {
			f.CleanupLatency = time.Since(killed)
			f.Notes = append(f.Notes, fmt.Sprintf("orphan run %s and its heartbeat key cleaned %v after the crash", shortRun(runID), f.CleanupLatency.Round(100*time.Millisecond)))
			return nil
		}
		if time.Since(killed) > d.cfg.CleanupSLA {
			d.violate(Violation{Check: CheckOrphanCleanup, Fault: f.N, Queue: queue, At: time.Now(), Detail: fmt.Sprintf(
				"%v after the crash of %s: run %s closed=%v, heartbeat key present=%v", d.cfg.CleanupSLA, p.id, runID, closed, n > 0)})
			return nil
		}
		if !sleepCtx(ctx, 250*time.Millisecond) {
			return ctx.Err()
		}
	}
}

// alternate returns, for the *n-th restart of a server, whether it is a crash (SIGKILL, every other
// time) or a clean stop (SIGTERM), and the signal's name.
func (d *Drill) alternate(n *int) (crash bool, how string) {
	d.mu.Lock()
	crash = *n%2 == 1
	*n++
	d.mu.Unlock()
	if crash {
		return true, "SIGKILL"
	}
	return false, "SIGTERM"
}

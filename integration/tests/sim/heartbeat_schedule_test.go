package sim_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/sim"
	"github.com/baton-run/baton/integration/sim/redismodel"
	"github.com/baton-run/baton/takeover"
)

// runHeartbeat is the batch's sim.Runner: one seed's heartbeat schedule in a bubble of its own.
func runHeartbeat(t *testing.T, seed uint64, keep bool) sim.Result {
	var res sim.Result
	synctest.Test(t, func(t *testing.T) { res = heartbeatSchedule(t, seed, keep) })
	return res
}

func heartbeatSchedule(t *testing.T, seed uint64, keep bool) sim.Result {
	s := sim.Streams{Seed: seed}
	wid, err := takeover.WorkflowID(hbProject, hbQueue)
	if err != nil {
		t.Fatal(err)
	}
	w := &hbWorld{r: s.Rand("faults"), rev: 100, terms: map[string]*hbTerm{}, probes: map[string]int{},
		key: heartbeat.Key(heartbeat.DefaultPrefix, hbProject, wid)}
	w.plan = drawHBPlan(w.r)
	w.rec = sim.NewRecorder(clock.Real(), keep)
	w.redis = redismodel.New(func(cmd string) {
		if cmd == "EVALSHA" || cmd == "EVAL" { // top-level: the store is not locked by a script
			w.observe()
		}
	})
	w.rec.Add("world", "setup %s", w.plan)
	ctx, cancel := context.WithCancel(t.Context())
	start := time.Now()
	w.elect(ctx, wid)
	for at := time.Duration(0); at < hbFaultPhase+hbHealPhase; at += hbStep {
		time.Sleep(hbStep)
		synctest.Wait()
		w.observe()
		switch {
		case at < hbFaultPhase:
			w.fault(ctx, wid)
		case at == hbFaultPhase:
			w.heal(ctx, wid)
		case at >= hbFaultPhase+hbLiveBound:
			w.checkLive()
		}
		w.flushNotes()
	}
	simulated := time.Since(start)
	cancel()
	w.wg.Wait()
	w.redis.Close()
	w.flushNotes()
	for _, v := range w.violations {
		w.rec.Add("world", "VIOLATION %s", v)
	}
	return sim.Result{Seed: seed, Violations: w.violations, Hash: w.rec.Hash(), Simulated: simulated, Probes: w.probes,
		Timeline: w.rec.Timeline(), Setup: w.plan.String()}
}

// elect makes a new term etcd's holder, with the next revision as its token, and starts its owner's
// real heartbeat.Writer. The term it replaces learns of its end after a seeded stale window (a
// paused or partitioned owner), during which its writes still reach Redis.
func (w *hbWorld) elect(ctx context.Context, wid string) {
	w.mu.Lock()
	w.rev += 1 + w.r.Int64N(4)
	w.n++
	tctx, tcancel := context.WithCancel(ctx)
	term := &hbTerm{w: w, id: fmt.Sprintf("p%d/t%d", w.n%w.plan.procs, w.n), token: w.rev, epoch: w.epoch, ctx: tctx, cancel: tcancel}
	old := w.current
	w.current = term
	w.terms[term.id] = term
	w.mu.Unlock()
	w.rec.Add("etcd", "elected %s token=%d epoch=%d", term.id, term.token, term.epoch)
	w.retire(old)
	writer, err := heartbeat.NewWriter(w.redis.Client(), heartbeat.Config{Interval: hbInterval, Timeout: hbTimeout,
		KeyTTL: hbKeyTTL, Clock: clock.Real()})
	if err != nil {
		panic(err) // a constant configuration
	}
	run := takeover.Run{WorkflowID: wid, RunID: "run-" + term.id, Owner: takeover.Owner{Project: hbProject, Queue: hbQueue,
		ServerID: term.id, Token: term.token}}
	w.wg.Go(func() {
		err := writer.RunReporting(tctx, term, run, func(err error) {
			if errors.Is(err, heartbeat.ErrSuperseded) {
				w.mu.Lock()
				w.probes[probeHBRefused]++
				w.noteLocked("%s (token=%d) refused: superseded", term.id, term.token)
				w.mu.Unlock()
			}
		})
		w.mu.Lock()
		w.noteLocked("writer of %s returned: %v", term.id, err)
		w.mu.Unlock()
	})
}

// retire ends an old term locally after a seeded stale window (at once for half the terms).
func (w *hbWorld) retire(old *hbTerm) {
	if old == nil {
		return
	}
	stale := time.Duration(w.plan.staleMax * w.r.Float64() * float64(time.Second))
	if w.r.IntN(2) == 0 {
		stale = 0
	}
	w.rec.Add("world", "%s learns of its end in %v", old.id, stale.Round(time.Millisecond))
	w.wg.Go(func() {
		select {
		case <-time.After(stale):
		case <-old.ctx.Done():
		}
		old.cancel()
	})
}

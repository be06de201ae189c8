package sim

import (
	"fmt"
	"sync"
	"testing/synctest"
	"time"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"go.etcd.io/etcd/api/v3/mvccpb"
)

// stage is what every world shares: the seed's streams, the recorder, the network and the etcd model
// of one schedule, and what the schedule found (violations and probes) under rmu, the recorder's side
// (a world may guard more with it: what it checks from the model's commits).
type stage struct {
	s     Streams
	rec   *Recorder
	net   *Net
	model *etcdmodel.Model

	rmu        sync.Mutex
	violations []string
	probes     map[string]int
	bg         sync.WaitGroup             // the world's background work (stops, restarts, owners) in flight
	snaps      map[int]etcdmodel.Snapshot // the planned restores' snapshots (the scheduler's alone)
}

// setUp builds the recorder, the network (with the plan's faults) and the model (onCommit may be nil)
// from the seed's streams, and records the plan.
func (g *stage) setUp(s Streams, keep bool, faults NetFaults, onCommit func(int64, []*mvccpb.Event, etcdmodel.View), plan fmt.Stringer) {
	g.s, g.probes = s, map[string]int{}
	g.rec = NewRecorder(clock.Real(), keep).InSteps() // the bubble's clock; the worlds' loops settle each step
	g.net = NewNet(g.rec, s.Rand("net"), faults)
	g.model = etcdmodel.New(etcdmodel.Options{Rand: s.Source("leases"), Transport: g.net, OnCommit: onCommit})
	g.rec.Add("world", "setup %s", plan)
}

// result is what the schedule found, once it ended.
func (g *stage) result(seed uint64, start time.Time, plan fmt.Stringer) Result {
	if g.net != nil && g.net.Duplicates() > 0 { // a world without an etcd network (carry-over) has none
		g.probe(ProbeDuplicate)
	}
	return Result{Seed: seed, Violations: g.violations, Hash: g.rec.Hash(), Simulated: time.Since(start),
		Probes: g.probes, Timeline: g.rec.Timeline(), Setup: plan.String()}
}

func (g *stage) violate(format string, args ...any) {
	v := fmt.Sprintf(format, args...)
	g.rec.Add("world", "VIOLATION %s", v)
	g.rmu.Lock()
	defer g.rmu.Unlock()
	g.violations = append(g.violations, v)
}

func (g *stage) probe(name string) {
	g.rmu.Lock()
	defer g.rmu.Unlock()
	g.probes[name]++
}

// quiesce waits until every goroutine of the bubble is durably blocked and settles the step the
// recorder was in: where every world's scheduler loop begins.
func (g *stage) quiesce() {
	synctest.Wait()
	g.rec.Settle()
}

// sleep lets the bubble's time run until due (at least a millisecond on), a new message on the
// network, or the end of the stop: the scheduler's wait between two steps, in every world.
func (g *stage) sleep(now, due time.Time, stopped <-chan struct{}) {
	t := time.NewTimer(max(due.Sub(now), time.Millisecond))
	defer t.Stop()
	select {
	case <-g.net.Notify():
	case <-t.C:
	case <-stopped:
	}
}

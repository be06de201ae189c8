package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// orphanQueues is how many sole owners crash at once, per reconciler configuration.
const orphanQueues = 10

// benchOrphans measures the cleanup of a crashed owner with no successor: each of orphanQueues
// queues has one owner (its own etcd session, a run, a heartbeat every 10 s) and nobody else standing;
// all crash at once (heartbeats stop, the session's lease is revoked: the instant its expiry would
// come), and the figure is from that instant to the run terminated. The project whose reconciler has
// the event-driven cleanup (OrphanGrace, the default) runs beside one whose reconciler has only its
// one-minute cycle (OrphanGrace < 0), the baseline, in the same run.
func benchOrphans(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	type owner struct {
		term *election.Term
		run  takeover.Run
		stop func()
	}
	setups := []struct {
		project string
		grace   time.Duration
	}{{"orphan-event", 0}, {"orphan-cycle", -1}}
	owners := map[string][]*owner{}
	var bg sync.WaitGroup
	bctx, cancel := context.WithCancel(ctx)
	defer func() { cancel(); bg.Wait() }()
	for _, st := range setups {
		cli, err := s.etcdClient()
		if err != nil {
			return nil, err
		}
		recEl, err := s.elector(cli, election.Config{Prefix: reconciler.DefaultElectionPrefix})
		if err != nil {
			return nil, err
		}
		leaders, err := s.elector(cli, election.Config{})
		if err != nil {
			return nil, err
		}
		rec, err := reconciler.New(reconciler.Config{Project: st.project, ServerID: "bench-reconciler", OrphanGrace: st.grace},
			s.rdb, s.tc, leaders)
		if err != nil {
			return nil, err
		}
		bg.Go(func() { _ = rec.Run(bctx, recEl) })
		mgr, err := takeover.New(s.tc, takeover.Config{StepDown: takeover.LeaveRunning})
		if err != nil {
			return nil, err
		}
		hb, err := heartbeat.NewWriter(s.rdb, heartbeat.Config{})
		if err != nil {
			return nil, err
		}
		for i := range orphanQueues {
			ocli, err := s.etcdClient()
			if err != nil {
				return nil, err
			}
			el, err := s.elector(ocli, election.Config{})
			if err != nil {
				return nil, err
			}
			term, err := el.Campaign(ctx, st.project, fmt.Sprintf("q%02d", i), fmt.Sprintf("owner-%02d", i))
			if err != nil {
				return nil, err
			}
			run, err := mgr.Take(ctx, term)
			if err != nil {
				return nil, err
			}
			hctx, stop := context.WithCancel(bctx)
			var wg sync.WaitGroup
			wg.Go(func() { _ = hb.Run(hctx, term, run) })
			owners[st.project] = append(owners[st.project], &owner{term: term, run: run, stop: func() { stop(); wg.Wait() }})
		}
	}
	// Every owner crashes at once.
	fmt.Printf("batonbench: orphans: %d sole owners crash in each of two projects (event-driven cleanup, cycle only)\n", orphanQueues)
	crashed := time.Now()
	for _, st := range setups {
		for _, o := range owners[st.project] {
			o.stop()
			if err := revokeLeaseOf(ctx, s.etcd, o.term.Key()); err != nil {
				return nil, err
			}
		}
	}
	took := map[string][]float64{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, st := range setups {
		for _, o := range owners[st.project] {
			wg.Go(func() {
				deadline := time.Now().Add(3 * time.Minute)
				for time.Now().Before(deadline) && sleepCtx(ctx, 100*time.Millisecond) {
					d, err := s.tc.DescribeWorkflowExecution(ctx, o.run.WorkflowID, o.run.RunID)
					if err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
						mu.Lock()
						took[st.project] = append(took[st.project], benchreport.Ms(time.Since(crashed)))
						mu.Unlock()
						return
					}
				}
			})
		}
	}
	wg.Wait()
	ev, cy := took["orphan-event"], took["orphan-cycle"]
	fmt.Printf("batonbench: orphans: cleaned up %d of %d (event-driven), %d of %d (cycle only)\n", len(ev), orphanQueues, len(cy), orphanQueues)
	target := reconciler.DefaultOrphanGrace + 2*time.Second
	return []benchreport.Figure{
		benchreport.NewFigure(fmt.Sprintf("orphan cleanup, crashed sole owner: lease expiry -> run terminated, event-driven (grace %v; %d of %d cleaned)",
			reconciler.DefaultOrphanGrace, len(ev), orphanQueues), "ms", ev,
			fmt.Sprintf("one-minute cycle alone, stale after 30 s (%d of %d cleaned)", len(cy), orphanQueues), cy,
			fmt.Sprintf("p99 <= %v", target), func(f benchreport.Figure) bool {
				return len(ev) == orphanQueues && f.P99 <= benchreport.Ms(target)
			}),
	}, nil
}

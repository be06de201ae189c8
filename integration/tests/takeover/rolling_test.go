package takeover_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// 4. Rolling restarts of 3 nodes over 5 queues, 20 rounds: for every queue, at every sample, at most
// one open dispatcher run; every takeover produced exactly one new run.
func TestRollingRestartsKeepOneDispatcherPerQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	queues := []string{"q0", "q1", "q2", "q3", "q4"}
	for _, q := range queues {
		e.worker(t, q)
	}
	type started struct {
		queue string
		run   takeover.Run
	}
	var mu sync.Mutex
	var runs []started
	recorded := map[string]bool{}
	// record notes a run a takeover returned, once: a takeover that retried after its own start (etcd
	// slow to confirm the term) returns that run as reused.
	record := func(q string, r takeover.Run) {
		mu.Lock()
		if !recorded[r.RunID] {
			recorded[r.RunID] = true
			runs = append(runs, started{q, r})
		}
		mu.Unlock()
	}
	snapshot := func() []started {
		mu.Lock()
		defer mu.Unlock()
		return append([]started(nil), runs...)
	}

	// A process: one node running the leader loop for every queue until stopped.
	type process struct {
		cancel context.CancelFunc
		wg     sync.WaitGroup
	}
	start := func(id string) *process {
		n := e.node(t, id, election.Config{}, takeover.Config{})
		ctx, cancel := context.WithCancel(t.Context())
		p := &process{cancel: cancel}
		for _, q := range queues {
			p.wg.Go(func() {
				var mine takeover.Run
				var held sync.Mutex
				_ = n.el.Run(ctx, project, q, id, election.Callbacks{
					OnElected: func(ctx context.Context, term *election.Term) error {
						run, err := n.mgr.Take(ctx, term)
						if err != nil {
							return err
						}
						held.Lock()
						mine = run
						held.Unlock()
						record(q, run)
						<-ctx.Done()
						return nil
					},
					OnResign: func(ctx context.Context, term *election.Term) {
						held.Lock()
						run := mine
						held.Unlock()
						if run.RunID != "" {
							err := n.mgr.StepDown(ctx, term, run)
							switch {
							case err != nil && (ctx.Err() != nil || errors.Is(err, context.DeadlineExceeded) || errors.As(err, new(*serviceerror.DeadlineExceeded))):
								// A loaded machine can use up ResignTimeout; the successor's takeover then
								// ends the run, which the checks below still hold to one open run.
								t.Logf("%s: step-down of %s: %v", id, q, err)
							case err != nil:
								t.Errorf("%s: step-down of %s: %v", id, q, err)
							}
						}
					},
				})
			})
		}
		return p
	}
	stop := func(p *process) { p.cancel(); p.wg.Wait() }

	// Sample: among all runs Baton started, at most one open per queue at any time.
	sampleCtx, stopSampling := context.WithCancel(t.Context())
	var samples, violations int
	var sampler sync.WaitGroup
	sampler.Go(func() {
		for sampleCtx.Err() == nil {
			open := map[string]int{}
			for _, s := range snapshot() {
				resp, err := e.tc.DescribeWorkflowExecution(sampleCtx, s.run.WorkflowID, s.run.RunID)
				if err == nil && resp.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
					open[s.queue]++
				}
			}
			samples++
			for q, n := range open {
				if n > 1 {
					violations++
					t.Errorf("queue %s: %d dispatcher runs open at once", q, n)
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	})

	ids := []string{"node-0", "node-1", "node-2"}
	procs := map[string]*process{}
	for _, id := range ids {
		procs[id] = start(id)
	}
	const rounds = 20
	for r := range rounds {
		id := ids[r%len(ids)]
		stop(procs[id])
		procs[id] = start(id)
		// Temporal refuses a restart of the same workflow ID within ~1 s; pace the rounds like a
		// rollout would, so every round's takeovers succeed on their first attempts.
		time.Sleep(1200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	stopSampling()
	sampler.Wait()
	for _, id := range ids {
		stop(procs[id])
	}

	perQueue := map[string]int{}
	for _, s := range snapshot() {
		perQueue[s.queue]++
	}
	for _, q := range queues {
		id, _ := takeover.WorkflowID(project, q)
		// Every run in Temporal is a takeover's, except a start whose takeover did not learn its run:
		// its term ended while the start was on the way (the takeover ends the run itself), or the
		// answer was lost on a loaded machine (a successor's takeover ends it). Either way it was ended
		// by its run ID, and the sampling above saw at most one open run at a time.
		for _, runID := range e.runsOf(t, id, perQueue[q]) {
			if recorded[runID] {
				continue
			}
			reason := e.closeEvent(t, id, runID).GetWorkflowExecutionTerminatedEventAttributes().GetReason()
			r, _ := takeover.ParseReason(reason)
			if r.Kind != takeover.ReasonLateStart && r.Kind != takeover.ReasonTakenOver {
				t.Errorf("queue %s: run %s is no takeover's and was not ended by run ID by Baton (reason %q)", q, runID, reason)
			}
		}
	}
	t.Logf("%d samples, %d violations, takeovers per queue %v", samples, violations, perQueue)
	// A sample describes every run so far: on a loaded machine there are fewer of them, never none.
	if samples < rounds {
		t.Fatalf("only %d samples over %d rounds", samples, rounds)
	}
	total := 0
	for _, n := range perQueue {
		total += n
	}
	if total < rounds {
		t.Fatalf("%d takeovers over %d restarts: leadership never moved?", total, rounds)
	}
}

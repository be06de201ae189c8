package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// The section on orphans of a vacancy older than the reconciler's term: a fleet of three workers
// over q1..q4 dies whole, and the one that comes back serves q1..q3 only.
const (
	orphanTermRounds = 8
	orphanTermTTL    = 3 * time.Second
	orphanTermQueue  = "q4"
	orphanTermSlack  = 5 * time.Second // the target: p99 <= TTL + this
)

// orphanTermRound is what one round measured.
type orphanTermRound struct {
	killed, started, vanished time.Time // the fleet SIGKILLed, the returning worker started, q4's last candidate key gone
	closed                    time.Time // q4's run closed (Temporal's close time)
	termStarted               time.Time // the returning worker's reconciler term (its event)
	vacantFirst               bool      // q4's last candidate went at or before the revision that let the term begin
	byReconciler              bool      // the returning worker's reconciler reported terminating the run
}

// benchOrphanTerm measures the cleanup of a dispatcher orphaned before the reconciler leader's term
// began, which the leader's watch of vacated queues cannot see: every worker of the project is
// SIGKILLed at once, and a single worker comes back that does not serve q4 (a supervisor restarting
// the fleet with a new configuration). It wins the reconciler election once the dead workers' leases
// expire and must clean up q4's run, which only the heartbeat entry the dead leader left still names.
//
// Two ways back, orphanTermRounds rounds each, a project per round. At once after the SIGKILLs: the
// figure is from the returning worker's process start to q4's run closed (Temporal's close time),
// beside the configured budget, the election TTL (the dead leases' expiry) plus the reconciler's
// OrphanGrace. The dead workers' q4 keys and reconciler keys are on different leases, so q4 may go
// vacant a few milliseconds after the term began; each round says which (by etcd revision). Once q4's
// last candidate key is gone (a watch sees it): the term then surely begins after the vacancy; the
// figure is from the SIGKILLs to the run closed, beside the same budget.
func benchOrphanTerm(ctx context.Context, s *servers, _ options) ([]benchreport.Figure, error) {
	fmt.Printf("batonbench: orphans before the term: %d rounds each of 3 workers over q1..q4 SIGKILLed, one back without %s (TTL %v, OrphanGrace %v)\n",
		orphanTermRounds, orphanTermQueue, orphanTermTTL, reconciler.DefaultOrphanGrace)
	var figs []benchreport.Figure
	for _, afterVacancy := range []bool{false, true} {
		way := "at once"
		if afterVacancy {
			way = "once " + orphanTermQueue + " is vacant"
		}
		var rounds []orphanTermRound
		for i := range orphanTermRounds {
			r, err := orphanTermOnce(ctx, s, fmt.Sprintf("orphan-term-%v-%d", afterVacancy, i+1), afterVacancy)
			if err != nil {
				return nil, fmt.Errorf("back %s, round %d: %w", way, i+1, err)
			}
			fmt.Printf("batonbench: orphans before the term: back %s, round %d: kill -> closed %v, start -> closed %v, q4 vacant -> closed %v; vacant by the revision that let the term begin: %v (seen %v before its term_started event); terminated by the returning reconciler: %v\n",
				way, i+1, r.closed.Sub(r.killed).Round(time.Millisecond), r.closed.Sub(r.started).Round(time.Millisecond),
				r.closed.Sub(r.vanished).Round(time.Millisecond), r.vacantFirst, r.termStarted.Sub(r.vanished).Round(time.Millisecond), r.byReconciler)
			rounds = append(rounds, r)
		}
		figs = append(figs, orphanTermFigures(way, afterVacancy, rounds)...)
	}
	return figs, nil
}

// orphanTermOnce is one round on project: the returning worker starts at once after the SIGKILLs, or
// with afterVacancy once q4's last candidate key is gone (its term then begins after the vacancy
// whatever the order of the dead workers' lease expiries).
func orphanTermOnce(ctx context.Context, s *servers, project string, afterVacancy bool) (orphanTermRound, error) {
	var r orphanTermRound
	f, err := newProducerFleet(s, project, []string{"q1", "q2", "q3", orphanTermQueue}, orphanTermTTL)
	if err != nil {
		return r, err
	}
	defer f.close()
	for i := 1; i <= 3; i++ {
		if _, err := f.start(ctx, fmt.Sprintf("%s-w%d", project, i)); err != nil {
			return r, err
		}
	}
	if err := f.waitLed(ctx, time.Minute); err != nil {
		return r, err
	}
	id, err := takeover.WorkflowID(project, orphanTermQueue)
	if err != nil {
		return r, err
	}
	// The run the reconciler must find: the one q4's heartbeat entry names.
	var runID string
	for deadline := time.Now().Add(30 * time.Second); runID == ""; {
		runID, _ = s.rdb.HGet(ctx, heartbeat.Key(heartbeat.DefaultPrefix, project, id), heartbeat.FieldRunID).Result()
		if runID == "" && (time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond)) {
			return r, fmt.Errorf("no heartbeat entry of %s within 30 s", id)
		}
	}
	// Watched from before the kill: q4's candidates, and the reconciler election's (all of them the
	// dead workers'; the returning worker's term can begin only once they are gone).
	wctx, stopWatches := context.WithCancel(ctx)
	defer stopWatches()
	q4Gone, err := watchGone(wctx, s.etcd, election.Keys{Prefix: election.DefaultConfig().Prefix}.Candidates(project, orphanTermQueue))
	if err != nil {
		return r, err
	}
	recGone, err := watchGone(wctx, s.etcd, election.Keys{Prefix: reconciler.DefaultElectionPrefix}.Candidates(project, reconciler.ElectionQueue))
	if err != nil {
		return r, err
	}
	for _, p := range f.procs {
		p.Signal(syscall.SIGKILL)
	}
	r.killed = time.Now()
	timeout := time.AfterFunc(time.Minute, stopWatches)
	defer timeout.Stop()
	var q4 gone
	if afterVacancy {
		if q4 = <-q4Gone; q4.err != nil {
			return r, fmt.Errorf("%s's candidate keys: %w", orphanTermQueue, q4.err)
		}
	}
	r.started = time.Now()
	back, err := workerproc.Start(workerproc.Options{}, f.bin, project+"-back", append(slices.Clone(f.env), "BATON_QUEUES=q1,q2,q3"))
	if err != nil {
		return r, err
	}
	f.procs = append(f.procs, back)
	if !afterVacancy {
		q4 = <-q4Gone
	}
	rec := <-recGone
	if err := cmp.Or(q4.err, rec.err); err != nil {
		return r, fmt.Errorf("the dead workers' candidate keys: %w", err)
	}
	timeout.Stop()
	r.vanished, r.vacantFirst = q4.at, q4.rev <= rec.rev || afterVacancy
	for deadline := time.Now().Add(3 * time.Minute); r.closed.IsZero(); {
		d, err := s.tc.DescribeWorkflowExecution(ctx, id, runID)
		if err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
				return r, fmt.Errorf("%s's run %s closed as %v, not terminated", orphanTermQueue, runID, st)
			}
			r.closed = d.GetWorkflowExecutionInfo().GetCloseTime().AsTime()
		} else if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return r, fmt.Errorf("%s's run %s still open 3 minutes after the SIGKILLs: %s", orphanTermQueue, runID, back.Tail(2000))
		}
	}
	for _, e := range back.Events(event.TermStarted, r.started) {
		if strings.HasPrefix(e.Key, reconciler.DefaultElectionPrefix+"/") {
			r.termStarted = e.At
		}
	}
	for _, e := range back.Events(event.StaleRunTerminated, r.started) {
		r.byReconciler = r.byReconciler || e.RunID == runID
	}
	if r.termStarted.IsZero() {
		return r, fmt.Errorf("the returning worker reported no reconciler term")
	}
	return r, nil
}

// orphanTermFigures are the figures of the rounds with the returning worker back way, beside the
// configured budget: from its start when it came back at once, from the SIGKILLs when it waited for
// the vacancy (its start is then informational, beside OrphanGrace alone).
func orphanTermFigures(way string, afterVacancy bool, rounds []orphanTermRound) []benchreport.Figure {
	var fromKill, fromStart, fromVacant []float64
	before, byRec := 0, 0
	for _, r := range rounds {
		fromKill = append(fromKill, benchreport.Ms(r.closed.Sub(r.killed)))
		fromStart = append(fromStart, benchreport.Ms(r.closed.Sub(r.started)))
		fromVacant = append(fromVacant, benchreport.Ms(r.closed.Sub(r.vanished)))
		if r.vacantFirst {
			before++
		}
		if r.byReconciler {
			byRec++
		}
	}
	budget := fmt.Sprintf("configured budget: TTL %v + OrphanGrace %v", orphanTermTTL, reconciler.DefaultOrphanGrace)
	budgetMs := []float64{benchreport.Ms(orphanTermTTL + reconciler.DefaultOrphanGrace)}
	graceText, graceMs := fmt.Sprintf("OrphanGrace %v", reconciler.DefaultOrphanGrace), []float64{benchreport.Ms(reconciler.DefaultOrphanGrace)}
	target := orphanTermTTL + orphanTermSlack
	targetText := fmt.Sprintf("p99 <= TTL + %v = %d ms", orphanTermSlack, target.Milliseconds())
	met := func(f benchreport.Figure) bool {
		return f.Samples == orphanTermRounds && f.P99 <= benchreport.Ms(target)
	}
	name := fmt.Sprintf("orphan of a vacancy begun before the reconciler's term: the whole fleet SIGKILLed, one worker back %s without the queue (TTL %v; %d of %d rounds vacant before the term, %d terminated by the returning reconciler)",
		way, orphanTermTTL, before, len(rounds), byRec)
	if afterVacancy { // started as the watch saw the vacancy: one figure for both
		return []benchreport.Figure{
			benchreport.NewFigure(name+": SIGKILL of the fleet -> run closed", "ms", fromKill, budget, budgetMs, targetText, met),
			benchreport.NewFigure(name+": queue's last candidate key gone (as a watch saw it; the returning worker started then) -> run closed", "ms", fromStart,
				graceText, graceMs, "informational", benchreport.Informational),
		}
	}
	return []benchreport.Figure{
		benchreport.NewFigure(name+": returning worker's start -> run closed", "ms", fromStart, budget, budgetMs, targetText, met),
		benchreport.NewFigure(name+": queue's last candidate key gone (as a watch saw it) -> run closed", "ms", fromVacant,
			graceText, graceMs, "informational", benchreport.Informational),
	}
}

// gone is when the last of a prefix's keys was deleted: its revision, and when a watch saw it.
type gone struct {
	rev int64
	at  time.Time
	err error
}

// watchGone watches the keys under prefix now and sends, once, when the last of them is deleted (or
// the error that ended the watch: ctx's end). Keys put after the call do not count.
func watchGone(ctx context.Context, cli *clientv3.Client, prefix string) (<-chan gone, error) {
	resp, err := cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	left := map[string]bool{}
	for _, kv := range resp.Kvs {
		left[string(kv.Key)] = true
	}
	if len(left) == 0 {
		return nil, fmt.Errorf("no key under %s", prefix)
	}
	out := make(chan gone, 1)
	wch := cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	go func() {
		for wr := range wch {
			if err := wr.Err(); err != nil {
				out <- gone{err: err}
				return
			}
			for _, ev := range wr.Events {
				if ev.Type != clientv3.EventTypeDelete {
					continue
				}
				delete(left, string(ev.Kv.Key))
				if len(left) == 0 {
					out <- gone{rev: ev.Kv.ModRevision, at: time.Now()}
					return
				}
			}
		}
		out <- gone{err: fmt.Errorf("%s: %d keys left when the watch ended: %w", prefix, len(left), context.Cause(ctx))}
	}()
	return out, nil
}

package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// openRun is an open dispatcher run the sweep listed, with the owner its memo names.
type openRun struct {
	id, runID string
	owner     takeover.Owner
}

// sweep finds the project's open dispatcher runs from Temporal's side that no heartbeat entry read in
// this cycle speaks for, since Redis can lose what the heartbeat entries say (FLUSHALL, a restart
// without persistence, a failover to a lagging replica, an entry past its key TTL, a queue removed from
// every worker's configuration). A run is terminated, by its run ID, when its queue has no leader, or
// has a leader with a newer token (so the run is not the leader's: Temporal keeps one open run per
// workflow ID). A run whose owner cannot be decided -- no readable owner memo, a workflow ID that is not
// its owner's, a leader with an older token than the run's -- is left alone and counted as undecided.
//
// Every run is decided from one read of the project's queue leaders, taken after the whole listing:
// the cycle's etcd cost does not grow with the number of open runs, and every run judged was started
// before that read, so a live owner's key is in it (a read taken before the listing would miss the
// leader of a run started in between, and end that leader's run).
func (r *Reconciler) sweep(ctx context.Context, term Term, rep *Report) error {
	runs, err := r.listOpen(ctx, term, rep)
	if err != nil || len(runs) == 0 {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	leaders, err := r.leaders.Leaders(cctx, r.cfg.Project)
	cancel()
	if err != nil {
		// Fail closed: without knowing the queues' leaders, touch none of their dispatchers.
		rep.CleanupErrors += len(runs)
		for range runs {
			r.metrics.cleanupError(ctx, "leader_lookup")
		}
		r.log.Warn("open dispatcher runs left for the next cycle: leader lookup failed", zap.Int("runs", len(runs)), zap.Error(err))
		return nil
	}
	for _, run := range runs {
		if err := r.sweepRun(ctx, term, run, leaders, rep); err != nil {
			return err
		}
	}
	return nil
}

// listOpen lists the project's open dispatcher runs page by page and returns those whose owner the
// sweep can judge; the others are counted (undecided) and logged here.
func (r *Reconciler) listOpen(ctx context.Context, term Term, rep *Report) ([]openRun, error) {
	query := fmt.Sprintf("WorkflowId STARTS_WITH %s AND ExecutionStatus = 'Running'", strconv.Quote(takeover.WorkflowIDPrefix(r.cfg.Project)))
	var (
		token []byte
		runs  []openRun
	)
	for {
		if err := r.check(term); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		resp, err := r.tc.ListWorkflow(cctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: int32(r.cfg.SweepPageSize), NextPageToken: token,
		})
		cancel()
		rep.TemporalCalls++
		if err != nil {
			return nil, fmt.Errorf("reconciler: list open dispatcher runs: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			id, runID := ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId()
			if rep.judged[runID] {
				continue // its heartbeat entry speaks for it: fresh, or stale and cleaned above
			}
			owner, found, err := takeover.DecodeOwner(r.cfg.DataConverter, ex.GetMemo())
			if err == nil && found && owner.Project != r.cfg.Project {
				continue // another project's run that shares the ID prefix
			}
			log := r.log.With(zap.String("workflow_id", id), zap.String("run_id", runID))
			if err != nil || !found {
				rep.Undecided++
				log.Debug("open dispatcher run without a readable owner left alone", zap.Error(err))
				continue
			}
			rep.Open++
			if want, err := takeover.WorkflowID(owner.Project, owner.Queue); err != nil || want != id {
				rep.Undecided++
				log.Warn("open dispatcher run whose owner does not match its workflow ID left alone",
					zap.String("owner_queue", owner.Queue))
				continue
			}
			runs = append(runs, openRun{id: id, runID: runID, owner: owner})
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return runs, nil
		}
	}
}

// sweepRun decides one open run against the queues' leaders; it returns an error only when the cycle
// must stop.
func (r *Reconciler) sweepRun(ctx context.Context, term Term, run openRun, leaders map[string]election.Leader, rep *Report) error {
	owner := run.owner
	log := r.log.With(zap.String("workflow_id", run.id), zap.String("run_id", run.runID),
		zap.String("queue", owner.Queue), zap.String("owner", owner.ServerID), zap.Int64("owner_token", owner.Token))
	leader, led := leaders[owner.Queue]
	switch {
	case !led:
	case leader.Token == owner.Token:
		return nil // the leader's own run
	case leader.Token < owner.Token:
		rep.Undecided++
		log.Warn("open dispatcher run carries a newer token than the queue's leader; left alone",
			zap.String("leader", leader.ID), zap.Int64("leader_token", leader.Token))
		return nil
	}
	if err := r.waitTurn(ctx); err != nil {
		return err
	}
	if err := r.confirm(ctx, term); err != nil {
		return err
	}
	reason := takeover.Reason{Kind: takeover.ReasonNoLiveOwner, By: term.LeaderID(), Token: term.Token(),
		Owner: owner.ServerID, OwnerToken: owner.Token}.String()
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	err := r.tc.TerminateWorkflowWithOptions(cctx, client.TerminateWorkflowOptions{WorkflowID: run.id, RunID: run.runID, Reason: reason})
	cancel()
	rep.TemporalCalls++
	var notFound *serviceerror.NotFound
	switch {
	case err == nil:
		rep.Orphans++
		r.metrics.terminated(ctx, "orphan")
		log.Info("orphaned dispatcher run terminated", zap.String("leader", leader.ID), zap.Int64("leader_token", leader.Token))
	case errors.As(err, &notFound):
		// Closed since the listing (visibility lags): nothing to do.
	default:
		rep.CleanupErrors++
		r.metrics.cleanupError(ctx, "terminate")
		log.Warn("orphaned dispatcher run left for the next cycle: terminate failed", zap.Error(err))
	}
	return nil
}

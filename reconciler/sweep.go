package reconciler

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// sweepPageSize is how many open runs one visibility page lists.
const sweepPageSize = 500

// sweep finds the project's open dispatcher runs from Temporal's side that no heartbeat entry read in
// this cycle speaks for, since Redis can lose what the heartbeat entries say (FLUSHALL, a restart without persistence, a failover to a lagging
// replica, an entry past its key TTL, a queue removed from every worker's configuration). A run is
// terminated, by its run ID, when its queue has no leader, or has a leader with a newer token (so the
// run is not the leader's: Temporal keeps one open run per workflow ID). A run whose owner cannot be
// decided -- no readable owner memo, a workflow ID that is not its owner's, a leader with an older
// token than the run's -- is left alone and counted as undecided.
func (r *Reconciler) sweep(ctx context.Context, term Term, rep *Report) error {
	query := fmt.Sprintf("WorkflowId STARTS_WITH %s AND ExecutionStatus = 'Running'", strconv.Quote(takeover.WorkflowIDPrefix(r.cfg.Project)))
	var token []byte
	for {
		if err := r.check(term); err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		resp, err := r.tc.ListWorkflow(cctx, &workflowservice.ListWorkflowExecutionsRequest{
			Query: query, PageSize: sweepPageSize, NextPageToken: token,
		})
		cancel()
		rep.TemporalCalls++
		if err != nil {
			return fmt.Errorf("reconciler: list open dispatcher runs: %w", err)
		}
		for _, ex := range resp.GetExecutions() {
			if rep.judged[ex.GetExecution().GetRunId()] {
				continue // its heartbeat entry speaks for it: fresh, or stale and cleaned above
			}
			if err := r.sweepRun(ctx, term, ex.GetExecution().GetWorkflowId(), ex.GetExecution().GetRunId(), ex, rep); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return nil
		}
	}
}

// sweepRun decides one open run; it returns an error only when the cycle must stop.
func (r *Reconciler) sweepRun(ctx context.Context, term Term, id, runID string, ex *workflowpb.WorkflowExecutionInfo, rep *Report) error {
	owner, found, err := takeover.DecodeOwner(r.cfg.DataConverter, ex.GetMemo())
	if err == nil && found && owner.Project != r.cfg.Project {
		return nil // another project's run that shares the ID prefix
	}
	log := r.log.With(zap.String("workflow_id", id), zap.String("run_id", runID))
	if err != nil || !found {
		rep.Undecided++
		log.Debug("open dispatcher run without a readable owner left alone", zap.Error(err))
		return nil
	}
	rep.Open++
	if want, err := takeover.WorkflowID(owner.Project, owner.Queue); err != nil || want != id {
		rep.Undecided++
		log.Warn("open dispatcher run whose owner does not match its workflow ID left alone",
			zap.String("owner_queue", owner.Queue))
		return nil
	}
	log = log.With(zap.String("queue", owner.Queue), zap.String("owner", owner.ServerID), zap.Int64("owner_token", owner.Token))
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	leader, err := r.leaders.Leader(cctx, r.cfg.Project, owner.Queue)
	cancel()
	switch {
	case errors.Is(err, election.ErrNoLeader):
	case err != nil:
		// Fail closed: without knowing the queue's leader, do not touch its dispatcher.
		rep.CleanupErrors++
		r.metrics.cleanupError(ctx, "leader_lookup")
		log.Warn("open dispatcher run left for the next cycle: leader lookup failed", zap.Error(err))
		return nil
	case leader.Token == owner.Token:
		return nil // the leader's own run
	case leader.Token < owner.Token:
		rep.Undecided++
		log.Warn("open dispatcher run carries a newer token than the queue's leader; left alone",
			zap.String("leader", leader.ID), zap.Int64("leader_token", leader.Token))
		return nil
	}
	if err := r.limiter.Wait(ctx); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	if err := r.confirm(ctx, term); err != nil {
		return err
	}
	reason := fmt.Sprintf("baton: reconciler %s (token %d): run of %s (token %d) has no live owner",
		term.LeaderID(), term.Token(), owner.ServerID, owner.Token)
	cctx, cancel = context.WithTimeout(ctx, r.cfg.CallTimeout)
	err = r.tc.TerminateWorkflowWithOptions(cctx, client.TerminateWorkflowOptions{WorkflowID: id, RunID: runID, Reason: reason})
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

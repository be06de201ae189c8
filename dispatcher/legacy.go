package dispatcher

import (
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/takeover"
)

// concurrentChange marks, for Temporal's versioning, the runs started by the concurrent dispatcher
// (batches, updates, carry-over). A run without the marker was started by the release before it,
// whose workflow handled one signal at a time with the Dispatch activity; a worker of this release
// that picks up such a run's workflow task (a rolling upgrade) must issue the same commands, so it
// runs that workflow's code, legacyRun, for the rest of the run. The run's next run after
// continue-as-new is this release's.
const concurrentChange = "baton.dispatcher.concurrent"

// startedByPreviousRelease tells, once per run and the same way on every replay, whether the run
// was started by the release before concurrentChange.
func startedByPreviousRelease(ctx workflow.Context, in Input) bool {
	if workflow.GetVersion(ctx, concurrentChange, workflow.DefaultVersion, 1) == 1 {
		return false
	}
	// Runs of the first concurrent builds recorded no concurrentChange marker; the previous release
	// knew none of these fields, and never recorded tuningChange.
	if in.ElectionKey != "" || in.PriorRunID != "" || in.MaxConcurrent > 0 || in.BacklogPage > 0 {
		return false
	}
	return workflow.GetVersion(ctx, tuningChange, workflow.DefaultVersion, 1) == workflow.DefaultVersion
}

// legacyRun is the previous release's workflow, command for command: each signal is handled in
// turn by one Dispatch activity, and the run continues as new at its history limit (into this
// release's code). It registers no update handler, so a Producer's update is refused and retried
// until the run is replaced. Its Owner has no ElectionKey, so the fenced ledger refuses its
// dispatches (ledger.ErrInvalidOwner): the requests stay unhandled in its history, and the next owner's
// takeover terminates the run and carries them over, like any predecessor's.
func legacyRun(ctx workflow.Context, in Input) error {
	limit := in.HistoryLimit
	if limit <= 0 {
		limit = DefaultHistoryLimit
	}
	recent := in.RecentKeys
	if recent <= 0 {
		recent = DefaultRecentKeys
	}
	state := State{Owner: in.Owner}
	if in.Carry != nil {
		state = *in.Carry
		state.Owner = in.Owner
		state.Generation++
	}
	log := workflow.GetLogger(ctx)
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (State, error) { return state, nil }); err != nil {
		return err
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        200 * time.Millisecond,
			MaximumInterval:        10 * time.Second,
			NonRetryableErrorTypes: []string{ErrTypeInvalidRequest},
		},
	})
	dispatches := workflow.GetSignalChannel(ctx, SignalDispatch)
	takeovers := workflow.GetSignalChannel(ctx, SignalTakeover)

	handle := func(req Request) { legacyHandle(ctx, log, &state, recent, req) }

	for {
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(dispatches, func(c workflow.ReceiveChannel, _ bool) {
			var req Request
			c.Receive(ctx, &req)
			handle(req)
		})
		sel.AddReceive(takeovers, func(c workflow.ReceiveChannel, _ bool) {
			var owner takeover.Owner
			c.Receive(ctx, &owner)
			log.Info("dispatcher run owned", "server_id", owner.ServerID, "token", owner.Token)
		})
		sel.Select(ctx)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		info := workflow.GetInfo(ctx)
		if info.GetCurrentHistoryLength() < limit && !info.GetContinueAsNewSuggested() {
			continue
		}
		for {
			var req Request
			if !dispatches.ReceiveAsync(&req) {
				break
			}
			handle(req)
		}
		for takeovers.ReceiveAsync(nil) {
		}
		carry := state
		return workflow.NewContinueAsNewError(ctx, WorkflowName, Input{Owner: in.Owner, Carry: &carry,
			HistoryLimit: in.HistoryLimit, RecentKeys: in.RecentKeys})
	}
}

// legacyHandle dispatches one request as the previous release did: one activity at a time.
func legacyHandle(ctx workflow.Context, logger log.Logger, state *State, recent int, req Request) {
	if err := req.Validate(); err != nil {
		state.Rejected++
		logger.Warn("dispatch request rejected", "error", err)
		return
	}
	key := req.Key()
	if state.seen(key) {
		state.Duplicates++
		return
	}
	var res Result
	err := workflow.ExecuteActivity(ctx, ActivityDispatch, Task{Key: key, Request: req, Owner: state.Owner}).Get(ctx, &res)
	if err != nil {
		logger.Error("dispatch failed", "key", key, "error", err)
		return
	}
	state.remember(key, recent)
	if res.Duplicate {
		state.Duplicates++
	} else {
		state.Dispatched++
	}
}

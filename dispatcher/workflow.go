package dispatcher

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/takeover"
)

// Names under which the workflow, its signals and its query are registered.
const (
	WorkflowName   = takeover.DefaultWorkflowType
	SignalDispatch = "baton.dispatch"
	SignalTakeover = "baton.takeover"
	QueryState     = "baton.state"
)

// Defaults of the workflow's tuning.
const (
	DefaultHistoryLimit = 5000 // events before continue-as-new
	DefaultRecentKeys   = 1000 // dispatch keys remembered in the run for a duplicate check without a round trip
)

// Input is the workflow's argument: the Owner a takeover starts it with, and the State a previous run
// of the same owner carried across continue-as-new.
type Input struct {
	takeover.Owner
	Carry        *State `json:"carry,omitempty"`
	HistoryLimit int    `json:"history_limit,omitempty"`
	RecentKeys   int    `json:"recent_keys,omitempty"`
}

// State is what the workflow knows and carries across continue-as-new.
type State struct {
	Owner      takeover.Owner `json:"owner"`
	Dispatched int64          `json:"dispatched"`
	Duplicates int64          `json:"duplicates"`
	Rejected   int64          `json:"rejected"`
	Recent     []string       `json:"recent"` // most recent dispatch keys, oldest first
	Generation int            `json:"generation"`
}

func (s *State) remember(key string, limit int) {
	s.Recent = append(s.Recent, key)
	if over := len(s.Recent) - limit; over > 0 {
		s.Recent = append(s.Recent[:0], s.Recent[over:]...)
	}
}

func (s *State) seen(key string) bool {
	for _, k := range s.Recent {
		if k == key {
			return true
		}
	}
	return false
}

// Workflow is the reference dispatcher: long-running and signal-driven. Each dispatch signal is
// handled by the Dispatch activity, which dedupes by the request's dispatch key in a ledger outside
// the run, so a duplicate is a no-op also after a takeover terminated the run that first saw it. It
// continues as new before its history grows large, carrying its State.
func Workflow(ctx workflow.Context, in Input) error {
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
			NonRetryableErrorTypes: []string{errTypeInvalid},
		},
	})
	dispatches := workflow.GetSignalChannel(ctx, SignalDispatch)
	takeovers := workflow.GetSignalChannel(ctx, SignalTakeover)

	handle := func(req Request) {
		if err := req.Validate(); err != nil {
			state.Rejected++
			log.Warn("dispatch request rejected", "error", err)
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
			// The request stays undispatched in this run; a resend retries it.
			log.Error("dispatch failed", "key", key, "error", err)
			return
		}
		state.remember(key, recent)
		if res.Duplicate {
			state.Duplicates++
		} else {
			state.Dispatched++
		}
	}

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
		// Hand every signal already received to this run before continuing as new: a signal left in
		// the channel would be lost with the run.
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

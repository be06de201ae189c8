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

// tuningChange marks, for Temporal's versioning, the runs that record their worker's tuning in
// their history; runs started before it was introduced replay with the defaults they ran with.
const tuningChange = "baton.dispatcher.tuning"

// Input is the workflow's argument: the Owner a takeover starts it with, and the State a previous run
// of the same owner carried across continue-as-new. Zero tuning fields take the worker's
// RegisterOptions.
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
	// Unhandled lists the requests a cancelled run accepted but did not see through: those still in
	// the signal channel, and the one whose dispatch was in flight (its attempt may still finish; the
	// ledger knows). Nothing else carries them: they need sending again to the next run.
	Unhandled []Request `json:"unhandled,omitempty"`
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

// Workflow is the reference dispatcher with the default tuning; Register and RegisterWithOptions
// register it with the worker's tuning. It is long-running and signal-driven. Each dispatch signal is
// handled by the Dispatch activity, which dedupes by the request's dispatch key in a ledger outside
// the run, so a duplicate is a no-op also after a takeover terminated the run that first saw it; the
// ledger refuses a superseded owner. It continues as new before its history grows large, carrying
// its Owner and State, and ends as Canceled when cancelled.
func Workflow(ctx workflow.Context, in Input) error { return run(ctx, in, RegisterOptions{}) }

func run(ctx workflow.Context, in Input, opts RegisterOptions) error {
	log := workflow.GetLogger(ctx)
	limit, recent := tuning(ctx, in, opts)
	state := State{Owner: in.Owner}
	if in.Carry != nil {
		state = *in.Carry
		state.Owner = in.Owner
		state.Generation++
	}
	if err := ValidateOwner(in.Owner); err != nil {
		log.Error("dispatcher run cannot be fenced; every dispatch will be refused", "error", err,
			"server_id", in.ServerID, "token", in.Token)
	}
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (State, error) { return state, nil }); err != nil {
		return err
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        200 * time.Millisecond,
			MaximumInterval:        10 * time.Second,
			NonRetryableErrorTypes: []string{ErrTypeInvalidRequest, ErrTypeInvalidOwner, ErrTypeSuperseded, ErrTypeBadRecord},
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
		switch {
		case err != nil && ctx.Err() != nil:
			// Cancelled while in flight: the attempt may still finish on its worker; the ledger then
			// says done (a resend is a duplicate) or pending (the next owner takes it over).
			state.Unhandled = append(state.Unhandled, req)
			return
		case err != nil:
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
	// cancelled ends a run an operator (or a parent) cancelled. Requests accepted but not handled are
	// not carried anywhere: they are listed in the State and logged, for a resend to the next run.
	cancelled := func() error {
		for {
			var req Request
			if !dispatches.ReceiveAsync(&req) {
				break
			}
			state.Unhandled = append(state.Unhandled, req)
		}
		if n := len(state.Unhandled); n > 0 {
			keys := make([]string, 0, n)
			for _, r := range state.Unhandled {
				keys = append(keys, r.Key())
			}
			log.Warn("dispatcher run cancelled with requests it did not see through", "unhandled", n, "keys", keys)
		}
		return ctx.Err()
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
		sel.AddReceive(ctx.Done(), func(workflow.ReceiveChannel, bool) {})
		sel.Select(ctx)
		if ctx.Err() != nil {
			return cancelled()
		}
		info := workflow.GetInfo(ctx)
		if info.GetCurrentHistoryLength() < limit && !info.GetContinueAsNewSuggested() {
			continue
		}
		// Hand every signal already received to this run before continuing as new: a signal left in
		// the channel would be lost with the run.
		for ctx.Err() == nil {
			var req Request
			if !dispatches.ReceiveAsync(&req) {
				break
			}
			handle(req)
		}
		if ctx.Err() != nil {
			return cancelled()
		}
		for takeovers.ReceiveAsync(nil) {
		}
		// The next run of the chain belongs to the same owner: its input carries this run's Owner
		// (and Temporal copies the memo).
		carry := state
		return workflow.NewContinueAsNewError(ctx, WorkflowName, Input{Owner: in.Owner, Carry: &carry,
			HistoryLimit: in.HistoryLimit, RecentKeys: in.RecentKeys})
	}
}

// tuning returns the run's history limit and recent-keys memory: the Input's, else the worker's
// options, else the defaults. Workers of one queue can be tuned differently for a while (a rolling
// change), and a replay must take the decisions of the original run, so a value taken from the
// worker's options is recorded in the history.
func tuning(ctx workflow.Context, in Input, opts RegisterOptions) (limit, recent int) {
	limit, recent = in.HistoryLimit, in.RecentKeys
	if limit > 0 && recent > 0 {
		return limit, recent
	}
	var o RegisterOptions
	if workflow.GetVersion(ctx, tuningChange, workflow.DefaultVersion, 1) == 1 {
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return opts }).Get(&o); err != nil {
			workflow.GetLogger(ctx).Error("dispatcher tuning unreadable; using the defaults", "error", err)
			o = RegisterOptions{}
		}
	}
	o = o.withDefaults()
	if limit <= 0 {
		limit = o.HistoryLimit
	}
	if recent <= 0 {
		recent = o.RecentKeys
	}
	return limit, recent
}

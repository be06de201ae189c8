package dispatcher

import (
	"errors"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// Names under which the workflow, its signals, its update and its query are registered.
const (
	WorkflowName   = takeover.DefaultWorkflowType
	SignalDispatch = "baton.dispatch"
	// UpdateDispatch is the workflow Update a Producer sends: the same request as SignalDispatch, with
	// the dispatch key as the update ID, completed once the request is recorded handled.
	UpdateDispatch = "baton.dispatch"
	SignalTakeover = "baton.takeover"
	QueryState     = "baton.state"
	// QueryProgress answers the run's Progress: what it holds and since when. The owner's progress
	// supervision (package progress) and `baton status` ask it.
	QueryProgress = "baton.progress"
)

// Progress is a run's answer to QueryProgress. Times are workflow times (the server's clock at the
// workflow task that saw the event), so a querier judges ages against its own clock.
type Progress struct {
	// Waiting counts the requests accepted and not started; InFlight those whose dispatch runs.
	Waiting  int `json:"waiting"`
	InFlight int `json:"in_flight"`
	// OldestAccepted is when the oldest waiting or in-flight request was accepted by this run (a
	// request carried over from an earlier run counts from when this run took it); zero when none.
	OldestAccepted time.Time `json:"oldest_accepted,omitzero"`
	// LastHandled is when a dispatch last completed in this run; zero before the first.
	LastHandled time.Time `json:"last_handled,omitzero"`
	// Backlog counts the earlier runs whose requests are still to be read back.
	Backlog    int   `json:"backlog"`
	Dispatched int64 `json:"dispatched"`
	Generation int   `json:"generation"`
	// Quiescing (a planned step-down) and Draining (continue-as-new is due) say why nothing starts.
	Quiescing bool `json:"quiescing,omitempty"`
	Draining  bool `json:"draining,omitempty"`
}

// tuningChange marks, for Temporal's versioning, the runs that record their worker's tuning in
// their history; runs started before it was introduced replay with the defaults they ran with.
const tuningChange = "baton.dispatcher.tuning"

// carryChange marks, for Temporal's versioning, the runs whose carry-over starts with a scan of the
// workflow ID's earlier runs (Source.Scan) rather than the takeover's prior run alone, and that never
// continue as new with a backlog page in flight; runs without it replay as they ran.
const carryChange = "baton.dispatcher.carry-every-run"

// backlogAttempts bounds one Backlog activity's attempts in a run that has carryChange: such a run
// waits for its page before it continues as new, so a reader that keeps failing must give the run
// back (it pauses, and may continue as new meanwhile) instead of holding it for ever.
const backlogAttempts = 5

// maxCarryBytes bounds the requests a run carries in its continue-as-new input (their estimated
// JSON size), well under Temporal's 2 MB payload limit together with MaxRecentKeys keys. A run with
// more waiting handles them before it continues as new.
const maxCarryBytes = 512 << 10

// Input is the workflow's argument: the Owner a takeover starts it with, and the State a previous run
// of the same owner carried across continue-as-new. Zero tuning fields take the worker's
// RegisterOptions.
type Input struct {
	takeover.Owner
	Carry         *State `json:"carry,omitempty"`
	HistoryLimit  int    `json:"history_limit,omitempty"`
	RecentKeys    int    `json:"recent_keys,omitempty"`
	MaxConcurrent int    `json:"max_concurrent,omitempty"`
	BacklogPage   int    `json:"backlog_page,omitempty"`
}

// State is what the workflow knows and carries across continue-as-new.
type State struct {
	Owner      takeover.Owner `json:"owner"`
	Dispatched int64          `json:"dispatched"`
	Duplicates int64          `json:"duplicates"`
	Rejected   int64          `json:"rejected"`
	// CarriedOver counts the requests read back from earlier runs' histories (Owner.PriorRunID and
	// what it had not finished reading itself).
	CarriedOver int64    `json:"carried_over"`
	Recent      []string `json:"recent"` // most recent dispatch keys, oldest first
	Generation  int      `json:"generation"`
	// Pending are requests accepted and not yet handled. A run fills it only for continue-as-new:
	// the next run of the chain handles them first.
	Pending []Request `json:"pending,omitempty"`
	// Backlog are the earlier runs whose accepted requests are still to be read back and handled
	// (see Activities.Backlog); empty once the carry-over is complete.
	Backlog []Source `json:"backlog,omitempty"`
	// Unhandled lists the requests a cancelled run accepted but did not see through: those waiting,
	// and those whose dispatch was in flight (an attempt may still finish; the ledger knows). The
	// next owner's run carries them over from this run's history.
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
// register it with the worker's tuning. It is long-running; requests arrive as SignalDispatch
// signals, UpdateDispatch updates and, for a run that took over, from its predecessors' histories.
// Each is handled by the Dispatch activity, at most MaxConcurrent at a time, which dedupes by the
// request's dispatch key in a ledger outside the run, so a repeat is a no-op also after a takeover
// terminated the run that first saw it; the ledger refuses a superseded owner. It continues as new
// before its history grows large, carrying its Owner, State and unhandled requests, and ends as
// Canceled when cancelled.
func Workflow(ctx workflow.Context, in Input) error { return run(ctx, in, ServeOptions{}) }

// ServeOptions shape Serve: the application's own dispatcher workflow around Baton's.
type ServeOptions struct {
	// Tuning is the run's tuning, as RegisterOptions are the reference workflow's on a worker: a
	// run's Input overrides it field by field, the defaults fill the rest. It must pass Validate.
	Tuning RegisterOptions
	// Start is the application's own code for the run: announcing the owner (ledger.ConfirmOwner, then a
	// write fenced by ledger.OwnerCmps), loading what the run needs. Serve calls it once Baton's update,
	// signal and query handlers are registered, so a request sent meanwhile is accepted and waits,
	// and before the first request is dispatched. It runs in every run of the chain (Input.Carry is
	// set in a run that continued as new) and must return: work that lasts the whole run goes in a
	// workflow.Go coroutine. An error ends the run as failed; its owner starts another, which carries
	// over what this one accepted. Nil: nothing.
	Start func(ctx workflow.Context) error
	// Next returns the workflow's arguments for the next run of the chain when this run continues as
	// new, given Baton's part of them. Default: next alone, for a workflow whose only argument is an
	// Input. A workflow with an input of its own returns it with next in it.
	Next func(next Input) []any
}

// Serve is the reference dispatcher inside an application's own dispatcher workflow: the same
// handlers, ledger, carry-over and continue-as-new, with the application's code in opts.Start and
// its own workflow type and input kept across continue-as-new (the next run is of the type the
// current one is, with the arguments opts.Next returns). The workflow registers under its own name
// (Config.Takeover.WorkflowType), gets its Input from the takeover's start hook (takeover.Start.Args,
// with Start.Owner in Input.Owner), and calls Serve first, before anything that blocks: Baton's
// update handler must be registered in the run's first workflow task, or a Producer's update sent
// to the new run fails until it is. The worker registers the activities with RegisterActivities.
//
//	func Dispatcher(ctx workflow.Context, in MyInput) error {
//		return dispatcher.Serve(ctx, in.Input, dispatcher.ServeOptions{
//			Start: func(ctx workflow.Context) error { return announce(ctx, in) },
//			Next:  func(next dispatcher.Input) []any { in.Input = next; return []any{in} },
//		})
//	}
//
// Every guarantee of the package holds as for the reference workflow: a request Serve accepted is
// handled once in effect, across takeovers and continue-as-new.
func Serve(ctx workflow.Context, in Input, opts ServeOptions) error {
	if err := opts.Tuning.Validate(); err != nil {
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidOptions, nil)
	}
	return run(ctx, in, opts)
}

// entry is one request the run accepted: waiting in the queue, in flight, or done.
type entry struct {
	req      Request
	key      string
	accepted time.Time // workflow time this run took it
	waiters  int       // update handlers waiting for the outcome
	started  bool
	done     bool
	res      Result
	err      error
}

// dispatcher is one run's request handling. Workflow code runs one coroutine at a time, so its
// fields need no locks; every decision depends only on the history, so a replay takes the same ones.
type dispatcher struct {
	ctx   workflow.Context // with the Dispatch activity options
	log   log.Logger
	state *State
	tune  RegisterOptions

	queue    []*entry          // accepted, not started, oldest first
	byKey    map[string]*entry // queued or in flight, so a request sent twice is handled once
	inFlight int
	fetching bool // a Backlog activity is in flight
	// quiescing is set by the owner's UpdateQuiesce before a planned step-down: no dispatch starts,
	// no update is accepted, and the update completes once the dispatches in flight are done.
	quiescing bool
	paused    bool // a Backlog activity failed: the next one waits a minute
	// waitPage is set in runs with carryChange: they never start draining with a page in flight.
	waitPage bool
	draining bool      // continue-as-new is due: no new updates, only their requests are started
	handled  time.Time // workflow time of the last completed dispatch
}

// progress is the run's answer to QueryProgress.
func (d *dispatcher) progress() Progress {
	p := Progress{Waiting: len(d.queue), InFlight: d.inFlight, LastHandled: d.handled, Backlog: len(d.state.Backlog),
		Dispatched: d.state.Dispatched, Generation: d.state.Generation, Quiescing: d.quiescing, Draining: d.draining}
	for _, e := range d.byKey {
		if p.OldestAccepted.IsZero() || e.accepted.Before(p.OldestAccepted) {
			p.OldestAccepted = e.accepted
		}
	}
	return p
}

// add accepts a request from any source and returns its entry: a new one, the one already queued or
// in flight for its key, or a finished one for an invalid request or a key this chain handled.
func (d *dispatcher) add(req Request) *entry {
	if err := req.Validate(); err != nil {
		d.state.Rejected++
		d.log.Warn("dispatch request rejected", "error", err)
		return &entry{req: req, done: true, err: temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidRequest, nil)}
	}
	key := req.Key()
	if e, ok := d.byKey[key]; ok {
		d.state.Duplicates++ // sent again while the first is queued or in flight: handled once
		return e
	}
	if d.state.seen(key) {
		d.state.Duplicates++
		return &entry{req: req, key: key, done: true, res: Result{Duplicate: true}}
	}
	e := &entry{req: req, key: key, accepted: workflow.Now(d.ctx)}
	d.byKey[key] = e
	d.queue = append(d.queue, e)
	return e
}

// fits says whether the waiting requests fit a continue-as-new input.
func (d *dispatcher) fits() bool {
	size := 0
	for _, e := range d.queue {
		size += requestSize(e.req)
	}
	return size <= maxCarryBytes
}

// next returns the index of the next queued request to start, or -1. Normally the oldest; while
// draining only one an update waits for, unless the queue is too large to carry.
func (d *dispatcher) next() int {
	if d.inFlight >= d.tune.MaxConcurrent || len(d.queue) == 0 || d.quiescing {
		return -1
	}
	if !d.draining || !d.fits() {
		return 0
	}
	for i, e := range d.queue {
		if e.waiters > 0 {
			return i
		}
	}
	return -1
}

// batchSize is how many requests one DispatchBatch activity carries: a quarter of the bound, so
// several batches are in flight and one slow request holds back only its own batch.
func (d *dispatcher) batchSize() int { return max(1, d.tune.MaxConcurrent/4) }

// startAll starts every request the bound allows, in batches.
func (d *dispatcher) startAll() {
	var batch []*entry
	for i := d.next(); i >= 0; i = d.next() {
		e := d.queue[i]
		d.queue = append(d.queue[:i], d.queue[i+1:]...)
		e.started = true
		d.inFlight++
		if batch = append(batch, e); len(batch) == d.batchSize() {
			d.start(batch)
			batch = nil
		}
	}
	if len(batch) > 0 {
		d.start(batch)
	}
}

// start runs the DispatchBatch activity for batch in its own coroutine.
func (d *dispatcher) start(batch []*entry) {
	in := Batch{Owner: d.state.Owner, Items: make([]BatchItem, len(batch))}
	for i, e := range batch {
		in.Items[i] = BatchItem{Key: e.key, Request: e.req}
	}
	f := workflow.ExecuteActivity(d.ctx, ActivityDispatchBatch, in)
	workflow.Go(d.ctx, func(ctx workflow.Context) {
		var res BatchResult
		err := f.Get(ctx, &res)
		d.inFlight -= len(batch)
		if err == nil && len(res.Results) != len(batch) {
			err = temporal.NewNonRetryableApplicationError("dispatcher: batch result does not match its items", ErrTypeDispatchFailed, nil)
		}
		for i, e := range batch {
			switch {
			case err != nil:
				d.finish(e, Result{}, err)
			case res.Results[i].ErrorType != "":
				d.finish(e, Result{}, temporal.NewNonRetryableApplicationError(res.Results[i].Error, res.Results[i].ErrorType, nil))
			default:
				d.finish(e, res.Results[i].Result, nil)
			}
		}
	})
}

func (d *dispatcher) finish(e *entry, res Result, err error) {
	e.done = true
	if err != nil && d.ctx.Err() != nil {
		// Cancelled while in flight: the attempt may still finish on its worker; the ledger then
		// says done (a resend is a duplicate) or pending (the next owner takes it over). The entry
		// stays listed for cancelled.
		e.err = err
		return
	}
	delete(d.byKey, e.key)
	switch {
	case err != nil:
		// Not handled in this run: an update's sender retries, and the next owner's run carries the
		// request over from this run's history (its dispatch did not complete here).
		d.log.Warn("dispatch failed", "key", e.key, "error", err)
		e.err = updateError(err)
	default:
		d.state.remember(e.key, d.tune.RecentKeys)
		d.handled = workflow.Now(d.ctx)
		e.res = res
		if res.Duplicate {
			d.state.Duplicates++
		} else {
			d.state.Dispatched++
		}
	}
}

// updateError is what an update handler returns for a failed dispatch: an application error with
// the activity's failure type, so a Producer tells a permanent failure from one the next run fixes.
func updateError(err error) error {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return temporal.NewNonRetryableApplicationError(app.Error(), app.Type(), nil)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeDispatchFailed, nil)
}

// wantBacklog says whether to read the next page of the predecessors' backlog: only when little is
// waiting, so a huge backlog is read as it is handled and never held (or carried) all at once.
func (d *dispatcher) wantBacklog() bool {
	return len(d.state.Backlog) > 0 && !d.fetching && !d.paused && !d.draining && !d.quiescing && len(d.queue) < d.tune.BacklogPage
}

// fetchBacklog reads one page of the backlog in its own coroutine and queues its requests.
func (d *dispatcher) fetchBacklog(ctx workflow.Context) {
	d.fetching = true
	f := workflow.ExecuteActivity(ctx, ActivityBacklog, BacklogInput{Sources: d.state.Backlog, Max: d.tune.BacklogPage})
	workflow.Go(ctx, func(ctx workflow.Context) {
		var page BacklogPage
		err := f.Get(ctx, &page)
		if err != nil {
			// The backlog stays where it was: this run tries again later, or carries it on.
			if ctx.Err() == nil {
				d.log.Warn("dispatcher backlog unreadable; retrying", "error", err)
				if d.waitPage {
					// Not in flight while it waits: the run may continue as new meanwhile.
					d.fetching, d.paused = false, true
				}
				_ = workflow.Sleep(ctx, time.Minute)
			}
			d.fetching, d.paused = false, false
			return
		}
		d.state.CarriedOver += int64(len(page.Requests))
		for _, r := range page.Requests {
			d.add(r)
		}
		d.state.Backlog = page.Next
		d.fetching = false
	})
}

// pageInFlight says whether a backlog page is being read that the run must apply before it may
// start draining: a run that continued as new with its page in flight would leave it unapplied,
// and a run whose history grows faster than its pages come back would never apply one.
func (d *dispatcher) pageInFlight() bool { return d.waitPage && d.fetching }

// pendingUpdates counts the update handlers still waiting for a request.
func (d *dispatcher) pendingUpdates() int {
	n := 0
	for _, e := range d.byKey {
		n += e.waiters
	}
	return n
}

func run(ctx workflow.Context, in Input, app ServeOptions) error {
	opts := app.Tuning
	if startedByPreviousRelease(ctx, in) {
		return legacyRun(ctx, in)
	}
	log := workflow.GetLogger(ctx)
	tune := tuning(ctx, in, opts)
	state := State{Owner: in.Owner}
	if in.Carry != nil {
		state = *in.Carry
		state.Owner = in.Owner
		state.Generation++
	}
	info := workflow.GetInfo(ctx)
	carryAll := workflow.GetVersion(ctx, carryChange, workflow.DefaultVersion, 1) == 1
	state.Backlog = startSources(info.WorkflowExecution.ID, info.FirstRunID, in, carryAll && in.Carry == nil)
	carried := state.Pending
	state.Pending = nil
	if err := ledger.ValidateOwner(in.Owner); err != nil {
		log.Error("dispatcher run cannot be fenced; every dispatch will be refused", "error", err,
			"server_id", in.ServerID, "token", in.Token)
	}
	d := &dispatcher{log: log, state: &state, tune: tune, byKey: map[string]*entry{}, waitPage: carryAll}
	var backlogCtx workflow.Context
	d.ctx, backlogCtx = activityContexts(ctx, carryAll)
	if err := d.setHandlers(ctx); err != nil {
		return err
	}
	for _, r := range carried {
		d.add(r)
	}
	if app.Start != nil {
		if err := app.Start(ctx); err != nil {
			if ctx.Err() != nil {
				return d.cancelled(workflow.GetSignalChannel(ctx, SignalDispatch))
			}
			log.Error("dispatcher run's start failed; the run ends and its owner starts another", "error", err)
			return err
		}
	}
	dispatches := workflow.GetSignalChannel(ctx, SignalDispatch)
	takeovers := workflow.GetSignalChannel(ctx, SignalTakeover)

	for {
		err := workflow.Await(ctx, func() bool {
			return dispatches.Len() > 0 || takeovers.Len() > 0 || d.next() >= 0 || d.wantBacklog() ||
				(!d.draining && d.due(ctx) && !d.pageInFlight()) || (d.draining && d.quiet(ctx))
		})
		if err != nil {
			return d.cancelled(dispatches)
		}
		d.receive(dispatches, takeovers)
		d.startAll()
		if d.wantBacklog() {
			d.fetchBacklog(backlogCtx)
		}
		if !d.draining && d.due(ctx) && !d.pageInFlight() {
			// From here no update is accepted (its sender retries on the next run), and only requests
			// that updates wait for are started; the rest travel in the next run's input.
			d.draining = true
		}
		if !d.draining || !d.quiet(ctx) {
			continue
		}
		// Every signal already delivered goes into the input: one left in the channel would be lost
		// with the run.
		d.receive(dispatches, takeovers)
		if !d.fits() {
			continue
		}
		return d.continueAsNew(ctx, in, app)
	}
}

// receive takes every request and owner signal already delivered.
func (d *dispatcher) receive(dispatches, takeovers workflow.ReceiveChannel) {
	for {
		var req Request
		if !dispatches.ReceiveAsync(&req) {
			break
		}
		d.add(req)
	}
	for {
		var owner takeover.Owner
		if !takeovers.ReceiveAsync(&owner) {
			break
		}
		d.log.Info("dispatcher run owned", "server_id", owner.ServerID, "token", owner.Token)
	}
}

// due says whether the run should continue as new: its history reached the limit, or Temporal
// suggests it.
func (d *dispatcher) due(ctx workflow.Context) bool {
	info := workflow.GetInfo(ctx)
	return info.GetCurrentHistoryLength() >= d.tune.HistoryLimit || info.GetContinueAsNewSuggested()
}

// quiet says whether the run can continue as new: no dispatch in flight, no update waiting, and
// what waits fits the next run's input. No backlog page is in flight either: draining starts only
// once the page in flight was applied (pageInFlight), and no page is read while draining. (Runs
// from before carryChange did not wait for the page; the next run read it again.)
func (d *dispatcher) quiet(ctx workflow.Context) bool {
	return d.inFlight == 0 && d.pendingUpdates() == 0 && workflow.AllHandlersFinished(ctx) && d.fits()
}

// activityContexts returns the contexts of the run's dispatch activities and of its Backlog
// activities (bounded attempts once runs carry every run: carryAll).
func activityContexts(ctx workflow.Context, carryAll bool) (dispatchCtx, backlogCtx workflow.Context) {
	dispatchCtx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        200 * time.Millisecond,
			MaximumInterval:        10 * time.Second,
			NonRetryableErrorTypes: []string{ErrTypeInvalidRequest, ErrTypeInvalidOwner, ErrTypeSuperseded, ErrTypeBadRecord},
		},
	})
	backlogRetry := &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute}
	if carryAll {
		backlogRetry.MaximumAttempts = backlogAttempts
	}
	backlogCtx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		// A history of Temporal's maximum size is read in one attempt; heartbeats show it progressing.
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    time.Minute,
		RetryPolicy:         backlogRetry,
	})
	return dispatchCtx, backlogCtx
}

// setHandlers registers the run's query and update handlers: the state query, the dispatch update
// and the owner's quiesce.
func (d *dispatcher) setHandlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, QueryState, func() (State, error) { return *d.state, nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, QueryProgress, func() (Progress, error) { return d.progress(), nil }); err != nil {
		return err
	}
	err := workflow.SetUpdateHandlerWithOptions(ctx, UpdateDispatch,
		func(ctx workflow.Context, req Request) (Result, error) {
			e := d.add(req)
			e.waiters++
			defer func() { e.waiters-- }()
			if err := workflow.Await(ctx, func() bool { return e.done }); err != nil {
				return Result{}, err
			}
			return e.res, e.err
		},
		workflow.UpdateHandlerOptions{Validator: func(req Request) error {
			if err := req.Validate(); err != nil {
				// Rejected before it is accepted: no event in the history, and the sender learns at once.
				return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeInvalidRequest, nil)
			}
			if d.draining {
				return temporal.NewApplicationError("dispatcher run is continuing as new; send the request again",
					ErrTypeContinuing)
			}
			if d.quiescing {
				return temporal.NewApplicationError("dispatcher run is handing over; send the request again", ErrTypeHandingOver)
			}
			return nil
		}})
	if err != nil {
		return err
	}
	// A planned step-down (takeover.Manager.StepDown) asks the run to let the dispatches in its
	// handlers finish, under the owner's term, before it ends the run: none of them is run again by
	// the successor. What waits is not started; the successor carries it over.
	err = workflow.SetUpdateHandler(ctx, takeover.UpdateQuiesce, func(ctx workflow.Context) (int, error) {
		d.quiescing = true
		if err := workflow.Await(ctx, func() bool { return d.inFlight == 0 }); err != nil {
			return 0, err
		}
		return len(d.queue), nil
	})
	if err != nil {
		return err
	}
	return nil
}

// continueAsNew ends the run into the next run of its chain, which carries the state and what waits,
// for the same owner (Temporal copies the memo), of this run's type: the reference workflow's, or the
// application's own (app.Next makes its input).
func (d *dispatcher) continueAsNew(ctx workflow.Context, in Input, app ServeOptions) error {
	carry := *d.state
	carry.Pending = make([]Request, 0, len(d.queue))
	for _, e := range d.queue {
		carry.Pending = append(carry.Pending, e.req)
	}
	next := Input{Owner: in.Owner, Carry: &carry,
		HistoryLimit: in.HistoryLimit, RecentKeys: in.RecentKeys, MaxConcurrent: in.MaxConcurrent, BacklogPage: in.BacklogPage}
	args := []any{next}
	if app.Next != nil {
		args = app.Next(next)
	}
	return workflow.NewContinueAsNewError(ctx, workflow.GetInfo(ctx).WorkflowType.Name, args...)
}

// cancelled ends a run an operator (or a parent) cancelled. Requests accepted but not handled are
// listed in the State and logged; the next owner's run carries them over from this run's history.
func (d *dispatcher) cancelled(dispatches workflow.ReceiveChannel) error {
	var inFlight []*entry
	for _, e := range d.byKey {
		if e.started {
			inFlight = append(inFlight, e)
		}
	}
	slices.SortFunc(inFlight, func(a, b *entry) int { return strings.Compare(a.key, b.key) }) // map order is random
	for _, e := range inFlight {
		d.state.Unhandled = append(d.state.Unhandled, e.req)
	}
	for _, e := range d.queue {
		d.state.Unhandled = append(d.state.Unhandled, e.req)
	}
	d.queue = nil
	for {
		var req Request
		if !dispatches.ReceiveAsync(&req) {
			break
		}
		d.state.Unhandled = append(d.state.Unhandled, req)
	}
	if n := len(d.state.Unhandled); n > 0 {
		keys := make([]string, 0, n)
		for _, r := range d.state.Unhandled {
			keys = append(keys, r.Key())
		}
		d.log.Warn("dispatcher run cancelled with requests it did not see through", "unhandled", n, "keys", keys)
	}
	return d.ctx.Err()
}

// tuning returns the run's tuning: the Input's fields, else the worker's options, else the
// defaults. Workers of one queue can be tuned differently for a while (a rolling change), and a
// replay must take the decisions of the original run, so a value taken from the worker's options is
// recorded in the history.
func tuning(ctx workflow.Context, in Input, opts RegisterOptions) RegisterOptions {
	t := RegisterOptions{HistoryLimit: in.HistoryLimit, RecentKeys: in.RecentKeys, MaxConcurrent: in.MaxConcurrent, BacklogPage: in.BacklogPage}
	if t.HistoryLimit > 0 && t.RecentKeys > 0 && t.MaxConcurrent > 0 && t.BacklogPage > 0 {
		return t
	}
	var o RegisterOptions
	if workflow.GetVersion(ctx, tuningChange, workflow.DefaultVersion, 1) == 1 {
		if err := workflow.SideEffect(ctx, func(workflow.Context) any { return opts }).Get(&o); err != nil {
			workflow.GetLogger(ctx).Error("dispatcher tuning unreadable; using the defaults", "error", err)
			o = RegisterOptions{}
		}
	}
	o = o.withDefaults()
	if t.HistoryLimit <= 0 {
		t.HistoryLimit = o.HistoryLimit
	}
	if t.RecentKeys <= 0 {
		t.RecentKeys = o.RecentKeys
	}
	if t.MaxConcurrent <= 0 {
		t.MaxConcurrent = o.MaxConcurrent
	}
	if t.BacklogPage <= 0 {
		t.BacklogPage = o.BacklogPage
	}
	return t
}

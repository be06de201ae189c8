// Package dispatcher is Baton's reference dispatcher workflow, its Dispatch activity and the
// Producer. A dispatch request takes effect once across takeovers through a Ledger of dispatch keys;
// package ledger is the etcd one Baton ships, and holds the checks an application uses to fence its
// own side effects the same way (ledger.OwnerCmps, ledger.ConfirmOwner).
//
// # The Owner contract
//
// A takeover starts every dispatcher run with a takeover.Owner as its input and memo: the run's
// exact-match lease, Token and ElectionKey (package ledger tells the contract). Every write the
// ledger makes for a run is fenced by it, and a handler fences its own side effects the same way; a
// refusal is ledger.ErrSuperseded, which retrying cannot fix. Continue-as-new keeps the Owner: every
// run of a chain belongs to the owner that started the first.
//
// # Dispatch
//
// A Request's identity fields decide its dispatch key (Request.Key, a SHA-256 over the fields joined
// with NUL), so the same request sent twice, or sent again to the next owner's run, has the same key.
// The workflow handles each request as the Dispatch activity does (the DispatchBatch activity runs
// it for several requests at once): it asks the Ledger to Begin the key for the run's owner, calls
// the application's Handler, and Completes the key. A key already completed is a duplicate and is
// not handled again. The handler is at-least-once between Begin and Complete: a run terminated or
// superseded in between leaves the key pending, and the next owner handles it again, so handlers
// must be idempotent by key. It is never run twice at once: the attempt that began a key holds it
// (HoldingLedger, ledger.AttemptKey) until its handler has returned, and another attempt waits for
// it to return meanwhile (its Begin would fail with ledger.ErrAttemptInFlight). So a request is
// handled again only after a crash, a planned move whose handler outlasted QuiesceTimeout, or a
// handler that failed; in the first case once the crashed attempt's claim has lapsed (ledger.AttemptTTL,
// 5 s, within the election's TTL), in the others once the first call returned. The activity fails
// without retrying, with the ApplicationError types ErrTypeSuperseded, ErrTypeInvalidOwner,
// ErrTypeInvalidRequest and ErrTypeBadRecord, when retrying cannot help.
//
// A run handles up to RegisterOptions.MaxConcurrent requests at a time (default 32), in
// DispatchBatch activities of a quarter of that each: a request's round trips (ledger, handler) no
// longer bound the queue's rate, and Temporal's cost, which is per activity, is shared by a batch.
// The same key queued or in flight twice is handled once.
//
// # Nothing accepted is lost
//
// A request reaches a run in three ways: a SignalDispatch signal (fire and forget), an
// UpdateDispatch update (Producer.Dispatch), or the carry-over below. Whatever a run accepted
// survives its end:
//
//   - Takeover. A takeover terminates the prior run by its run ID and names it in the new run's
//     Owner.PriorRunID. The new run first collects the workflow ID's earlier runs, newest first, back
//     to the last run that finished its own carry-over and at least to the prior run, and reads each
//     one's history with the Backlog activity: it re-dispatches every request such a run accepted
//     whose Dispatch activity did not complete in it (signals, accepted updates, what it carried in
//     its own input and what it read back itself). A pointer alone is not enough: a superseded term's
//     start that lands late, while no run is open, becomes the ID's latest run although it never saw
//     the runs before it, and its starter ends it at once; every run of the ID since the last carried
//     one is read, so such a run hides nothing. Nothing cleverer is subtracted; the ledger makes a
//     handled one a duplicate and finishes one left pending by a run terminated mid-activity. The backlog
//     is paged (at most RegisterOptions.BacklogPage requests and 512 KB per activity, the next page
//     read once fewer than a page wait), so a backlog of any size is handed over in parts, never
//     truncated. The same holds after a crash (the reconciler or the successor terminated the run)
//     and after a graceful step-down (the owner terminated its own run).
//   - Which runs exist is never taken from Temporal's visibility alone. Visibility is eventually
//     consistent and its writes are not ordered across runs (a failed visibility task is retried while
//     later runs' rows go through): a closed run can be listed as RUNNING, or not at all, for as long
//     as its close waits to be indexed. So every run a takeover starts, reuses or ends is first logged
//     in etcd (takeover.RunLog; the run's Owner.RunLog names the range), and a run a takeover could
//     not log is never ended by it: it stays open, and the next takeover's describe or its FAIL-policy
//     start finds it and names it. The carry-over reads the log (Activities.RunLog, by default the
//     ledger.Etcd's client) and describes each logged chain's runs and the prior run by run ID,
//     following continue-as-new links: strongly consistent reads. Visibility (Activities.History's
//     ListWorkflow) only adds runs Baton did not log; a row's status is never believed: every run is
//     read from its history, and one whose history is not closed yet fails the page, which is retried
//     (waited out, never skipped). A scan forgets the log's records of the chains older than the run
//     it stopped at. What remains outside the rule: a run that a superseded starter could not log (it
//     died between its start's answer and the log) and that someone other than Baton closed before the
//     next takeover looked; visibility still covers it once its close is indexed. An etcd role that
//     predates the log (takeover.ErrRunLogDenied) does not stop a fleet: takeovers and carry-overs
//     go on without it, as before it, and each says so once at error level.
//   - Planned moves. Before a graceful step-down (stop, drain, rollout, shed) ends its run, the
//     owner sends it the takeover.UpdateQuiesce update: the run starts no more dispatches, refuses
//     new updates with ErrTypeHandingOver (a Producer sends them again, to the successor), and
//     completes the update once the dispatches in its handlers are done, under the owner's term,
//     bounded by takeover.Config.QuiesceTimeout. The quiesce runs inside the election's hand-over
//     (OnResign), whose bound (election.Config.HandOverTimeout) Baton's Node sets from the quiesce's
//     (takeover.Config.HandOverBudget), so every planned move, a Node.Stop without Node.Quiesce and
//     each balance move alike, waits the whole QuiesceTimeout. So a planned move whose handlers
//     finish within QuiesceTimeout runs no handler twice; only a crash, or a handler slower than
//     that, leaves a dispatch between Begin and Complete to the successor, which begins it once the
//     first call has returned (never beside it: see Dispatch above).
//   - Continue-as-new. When the history reaches HistoryLimit (or Temporal suggests it), the run stops
//     accepting updates (they are rejected with ErrTypeContinuing before they are accepted, and a
//     Producer sends them again to the next run), waits for the dispatches in flight and the
//     updates it accepted, and passes the requests still waiting, and the backlog it has not read,
//     in the next run's input (State.Pending, State.Backlog). A queue too large for one input
//     (512 KB) is handled down first. A backlog page in flight is applied before the run starts
//     to drain, whatever the limit or the server's suggestion: a run that left it behind would hand
//     the next run the same page to read, and a history that grows faster than pages come back
//     would never apply one. A Backlog activity that fails its attempts pauses for a minute, during
//     which the run may continue as new.
//   - Cancel. A run cancelled (for example by an operator) ends as Canceled at once. The dispatch in
//     flight at that moment may still finish on its worker: the ledger then records it done, or
//     leaves it pending. Requests it had accepted but not handled are listed in its State
//     (Unhandled, readable with QueryState after the close) and logged; the next owner's takeover
//     carries them over from its history.
//
// # The producer API: Update, not signal
//
// Producer.Dispatch sends a workflow Update with the dispatch key as the update ID to the workflow ID
// (no run ID, so whichever run is current) and waits for its completion, which the workflow sends
// once the request is recorded handled. An Update was chosen over a signal because:
//
//   - it answers: a signal is acknowledged when Temporal stored it, which says nothing about whether
//     it will be handled; an Update's completion is the handling itself (Result.Duplicate says the
//     key had been handled before), so the caller knows when a request is safe;
//   - a validator rejects an invalid request before it is accepted: no history event, and the
//     caller gets ErrInvalidRequest at once instead of a request silently counted as rejected;
//   - the update ID deduplicates in the run: the same request sent twice (a retry after a lost
//     response) joins the first update;
//   - failures across a handover are explicit (the run closed with the update admitted or accepted,
//     no run is open), so the Producer retries exactly those until its context ends. An update the
//     closing run had accepted is also carried over from its history, and the retry joins it in the
//     next run.
//
// Temporal bounds Updates per run (history.maxInFlightUpdates, default 10 in flight, and
// history.maxTotalUpdates, default 2000); past them the server answers ResourceExhausted or
// FailedPrecondition, which the Producer retries, and the workflow continues as new when Temporal
// suggests it. Fire-and-forget SignalDispatch senders keep working, and the carry-over covers them
// too, but only Dispatch tells the sender when its request is safe.
//
// RegisterWithOptions tunes, per worker, when runs continue as new (HistoryLimit), how many keys
// they remember without asking the ledger (RecentKeys), how many requests they handle at a time
// (MaxConcurrent) and the carry-over page (BacklogPage); a run's Input overrides each.
//
// # Running the dispatcher's workers
//
// Every worker process runs a Temporal worker on each queue's dispatcher task queue
// (takeover.DefaultTaskQueue, or Config.Takeover.TaskQueue), registered with Register (or
// RegisterActivities beside the application's own workflow), so a run's workflow and activity tasks
// go to whichever worker polls first, the leader or not. Build that worker's options with
// WorkerOptions: a crash of a worker that leads nothing then stalls the runs whose tasks it held for
// about a second, not for the SDK's defaults. A run's next workflow task waits on the crashed
// worker's sticky queue for StickyScheduleToStartTimeout (WorkerOptions: 1s; the SDK's default is
// 5s), and a task it had already started waits for the run's workflow task timeout, which the
// takeover sets (takeover.Config.WorkflowTaskTimeout, default 2s; Temporal's default is 10s; the
// chain keeps it across continue-as-new). Requests the run accepted meanwhile wait as long; a crash
// of the leader costs the election TTL instead, until the successor's run carries them over.
//
// # Your own dispatcher workflow
//
// An application that needs its own code in the dispatcher run (announce the owner, load
// configuration, run side work) writes its own workflow around Serve instead of registering the
// reference one: the workflow registers under Config.Takeover.WorkflowType, its input embeds Input
// (the takeover's start hook builds it from takeover.Start.Owner), it calls Serve first, with its own
// code in ServeOptions.Start and its input for the next run in ServeOptions.Next, and the worker
// registers the activities with RegisterActivities. Baton's handlers are then registered before any
// of the application's code runs, continue-as-new keeps the application's workflow type and input,
// and every guarantee above holds as for the reference workflow. examples/shipping is such an
// application. Calling Workflow (or the reference workflow's body) from a workflow of one's own is not
// supported: its handlers would be registered only after the application's code, and it would
// continue as new with the reference workflow's input alone.
//
// The Producer's contract is the same for both: the update UpdateDispatch with the dispatch key as
// its update ID, a validator that refuses an invalid request before it is accepted, a completion
// that means "recorded handled" (Result.Duplicate when it had been before), and the failures a
// caller may retry; Producer.Dispatch documents each.
//
// # Upgrading from the one-request-at-a-time dispatcher
//
// Runs started by the previous release (signals handled one at a time by the Dispatch activity)
// carry no version marker; a worker of this release that picks up one of their workflow tasks
// replays and continues them with that release's code, command for command, until they continue as
// new into this one (workflow.GetVersion, see legacy.go). Their Owner has no ElectionKey, so the
// fenced ledger refuses their dispatches: what they accept waits in their history until the next
// owner's takeover terminates them and carries it over. testdata holds histories recorded by both
// releases; the replay test must pass for each before a change to the workflow's commands ships.
//
// # The etcd ledger
//
// ledger.Etcd keeps one record per dispatch key of each project, each written only by the key's
// current owner, for a retention; its package doc tells the layout, the legacy layout and what each
// write guarantees.
package dispatcher

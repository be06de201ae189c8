// Package temporalmodel is an in-memory model of the part of the Temporal service that Baton's
// takeover and the dispatcher's carry-over reach, for the deterministic simulator (issue #42). Its
// Client satisfies takeover.Client and dispatcher.HistoryReader, so the real takeover.Manager and
// the real Backlog activity run against it inside a testing/synctest bubble.
//
// # What it models
//
// Per workflow ID an ordered list of runs: status, start and close time, the memo exactly as the
// SDK encodes it (so takeover.DecodeOwner reads the Owner), the start request ID and the chain's
// first run (FirstExecutionRunId). At most one run of an ID is open. The answers follow Temporal
// v1.32's history service, and integration/tests/sim's TestConformanceTemporal... compares them with
// the real server's, field by field:
//
//   - start (start.go): WorkflowIDConflictPolicy FAIL (serviceerror.WorkflowExecutionAlreadyStarted
//     naming the open run), USE_EXISTING (the open run's ID, no new run), TERMINATE_EXISTING (the
//     open run is terminated, whatever it is, and a new one starts); reuse policies ALLOW_DUPLICATE,
//     ALLOW_DUPLICATE_FAILED_ONLY and REJECT_DUPLICATE against the latest closed run; a start whose
//     request ID is the latest run's is a retry and answers with that run (a duplicate delivery);
//     signal-with-start signals an open run (USE_EXISTING), refuses FAIL, and otherwise starts a
//     run, its request ID deduping only the signal;
//   - terminate (terminate.go): by workflow ID and run ID, by the current run (no run ID), or by
//     FirstExecutionRunId (the run ID is then ignored): a closed run answers NotFound "workflow
//     execution already completed", a current run of another chain NotFound "workflow execution
//     not found", an unknown run or ID NotFound;
//   - describe (describe.go) and the close event of a run's history, long-polled (history.go);
//   - out-of-band closes (close.go): an operator's terminate or cancel, a workflow that completes or
//     fails, and continue-as-new (a new run of the same chain);
//   - UpdateWorkflow (update.go): the open run completes the update at once, as a dispatcher with
//     no work in flight does;
//   - each run's history (events.go): the started event (input, FirstExecutionRunId, the run it
//     continued from), the events a world appends for the workflow code the model does not run
//     (Append: signals, accepted updates, activities scheduled, completed and failed), and the
//     close event; read whole with GetWorkflowHistory's all-event filter;
//   - visibility (visibility.go): ListWorkflow for the query WorkflowId = "<id>", in the SQL
//     store's order (coalesce(close_time, max) DESC, start_time DESC, run_id), paged, and eventually
//     consistent with Options.VisibilityLag: a run's row missing, or a closed run still RUNNING,
//     for a seeded time; and the reconciler's sweep query (WorkflowId STARTS_WITH "<prefix>", with
//     or without AND ExecutionStatus = 'Running'): the rows of every ID with the prefix, filtered on
//     the status visibility shows (not compared with the server's by the conformance test).
//
// Every error is the SDK's serviceerror type, so Baton's classification runs as it does against a
// server. The model is a state machine and nothing else: delays, loss, duplicates and reordering are
// the network's, which the simulator puts in front of it (a lost response after the effect is the
// model applying a request whose answer the caller never sees).
//
// Not modelled: workflow tasks and their timeouts, workflow code (a world writes what its modelled
// workflow did with Append), signal delivery beyond a count and the history events, Update handlers
// other than an instant completion, visibility queries other than by workflow ID. The conformance
// test compares the listing (order, statuses, paging) and the started events with the server's;
// UpdateWorkflow, the appended events and the lag it does not.
//
// Options.TerminateIgnoresRunID plants a bug (terminate reaches the current run whatever run ID it
// names) for the conformance test to prove that it catches a model that drifted.
package temporalmodel

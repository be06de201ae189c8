// Package takeover makes an election winner the owner of its queue's Temporal dispatcher workflow.
//
// Every (project, queue) has one dispatcher workflow ID, "dispatcher-<project>-<queue>" (WorkflowID),
// so every owner addresses the same workflow. Manager.Take, called with a fresh election term:
//
//  1. describes the workflow; an open run that already carries this term's owner is reused, and one
//     that carries a newer fencing token means this term is stale (ErrSuperseded);
//  2. confirms the term (locally, then with a guarded etcd read) and terminates the prior run by its
//     exact run ID, with a reason naming the new owner and token, so the old run's history shows who
//     replaced it and its close precedes the new run's start;
//  3. confirms the term again and starts the new run with WorkflowIDConflictPolicy TERMINATE_EXISTING
//     and WorkflowIDReusePolicy ALLOW_DUPLICATE (never the deprecated TERMINATE_IF_RUNNING reuse
//     policy); the run's input and memo carry the Owner: server ID, fencing token, takeover start;
//  4. retries with jittered backoff, bounded by MaxAttempts, while the term lives: Temporal refuses to
//     start the same ID again within about a second of the previous start, and a server that is down
//     answers Unavailable. The takeover is abandoned the moment the term ends.
//
// Legacy servers (before Temporal 1.24, without WorkflowIDConflictPolicy) start first and answer a
// WorkflowExecutionAlreadyStarted by terminating exactly that run and retrying.
//
// On graceful step-down the owner calls StepDown while its term still holds: with TerminateOwnRun it
// terminates its own run by run ID; with LeaveRunning the successor's takeover does it. A superseded
// term terminates nothing.
//
// What fencing cannot cover: the start in step 3 is a Temporal call, not an etcd transaction. A process
// paused for longer than its lease between its last confirmation and the start's arrival at Temporal
// could replace a successor's run. Steps 1 and 2 narrow this to a pause of at least TTL - SafetyMargin
// between the last confirmation and the start, inside one takeover.
//
// Metrics (OpenTelemetry, injected MeterProvider): baton.takeover (counter by outcome and path),
// baton.takeover.latency (seconds from term start to the new run open), baton.takeover.terminations.
package takeover

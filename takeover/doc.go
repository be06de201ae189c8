// Package takeover makes an election winner the owner of its queue's Temporal dispatcher workflow, and
// keeps it the owner of one open run for its whole term.
//
// Every (project, queue) has one dispatcher workflow ID, "dispatcher-<project>-<queue>" (WorkflowID),
// so every owner addresses the same workflow. The run's input and memo (MemoKey) carry the Owner: server
// ID, fencing token (the etcd create revision of the term's key), the term's election key, and when the
// takeover started.
//
// # The owner contract
//
// This is the one place that states what a dispatcher run may rely on. Every run Baton starts carries
// its Owner in the memo under MemoKey, always, and by default also as its only input. A Config.Start
// hook may give the workflow an input, task queue, timeouts and search attributes of its own; it
// cannot change the workflow ID, the ID policies or the memo's Owner (ErrInvalidStart), so a run's
// fencing data is always Baton's. The run's right to act is the exact-match lease in its Owner:
// ElectionKey exists in etcd with create revision Token exactly while the term that started the run
// holds. A workflow or activity that acts outside Temporal checks it, with the Owner it was given
// (copied into its input by the hook, or read from the memo with DecodeOwner):
//
//   - ledger.ConfirmOwner(ctx, kv, owner) right before a side effect outside etcd: nil means the
//     term still holds; an error wrapping ledger.ErrSuperseded means it does not and the run must
//     not act; any other error means etcd did not answer, and the run must not act either;
//   - ledger.OwnerCmps(owner) in the If of the etcd transaction that makes a write of its own, so
//     that the write is refused once the owner is superseded.
//
// These are the supported token checks. The leader that etcd shows (election.Leader, Node.Status) is
// advisory and must not be used to decide to act; a process that holds the term itself fences its own
// etcd writes with the term's Guard (baton.Node.Term).
//
// # Taking over
//
// Manager.Take, called with a fresh election term, repeats until it succeeds, the term ends or
// MaxAttempts is used up (jittered backoff between attempts):
//
//  1. it describes the workflow; an open run that already carries this term's owner is reused;
//  2. an open run of an earlier owner is terminated by its exact run ID, with a reason naming the new
//     owner and token, after confirming the term (locally, then with a guarded etcd read);
//  3. it confirms the term again and starts a run with WorkflowIDConflictPolicy FAIL and
//     WorkflowIDReusePolicy ALLOW_DUPLICATE. A run that appeared since the describe (a successor's, or a
//     superseded leader's late start) makes the start fail with AlreadyStarted, and the next attempt
//     looks again: a start never ends a run it did not name. TERMINATE_EXISTING is never used: the server
//     would end whatever run is current when the request arrives, so a superseded leader's start, sent
//     while its term held and delayed in the network, would kill its successor's run;
//  4. it confirms the term once more after the start. A run started by a term that ended on the way is
//     terminated by its own run ID and the takeover reports ErrSuperseded.
//
// With a RunLog (Config.RunLog; Baton's Node keeps an EtcdRunLog), every run the takeover reuses,
// terminates (step 2) or starts (step 3) is logged before the takeover ends it or reports it, and the
// run's Owner.RunLog names the log's range for the queue. A dispatcher run's carry-over reads the log
// to find every earlier run that may have accepted requests: visibility, eventually consistent, may
// still list a closed run as RUNNING, or not list it. A run that could not be logged is not ended by
// the takeover: it stays open for the next takeover to find, by describe or by its start's conflict.
//
// Every run starts with Config.WorkflowTaskTimeout as its workflow task timeout (default 2s where
// Temporal's is 10s), and its chain keeps it across continue-as-new: every worker polls the
// dispatcher task queue, so the crash of any worker, leader or not, may leave a run's workflow task
// held, and the run waits that long before another worker gets it.
//
// An open run with a higher token than the term is a newer owner's, and the takeover is superseded,
// unless etcd still confirms the term: then no newer term can exist, the higher token is a history
// regression (an etcd restored without --bump-revision, a move to a new cluster), and the run is
// replaced, logged at error level and counted (baton.takeover.regressions) instead of holding the term
// without a dispatcher.
//
// The owner memo is read with Config.DataConverter, which must be the Temporal client's converter when
// the application encodes payloads. A memo that cannot be decoded fails the takeover
// (ErrUnreadableOwner): reading every token as 0 would silently remove the token guard. Failures that
// retrying cannot fix (namespace not found, permission denied, invalid argument, an unreadable memo)
// wrap ErrPermanent; a Node then keeps the term for a hold (ownership.Settings.PermanentHold, growing
// with the queue's failed terms, which the fleet shares: package ownership), retries with backoff
// (Config.RetryMin doubling) meanwhile, and reports the cause in readiness.
//
// In signal-with-start mode the server only signals a run that is already open, so the takeover
// describes the run the call reached and accepts it only when it carries this owner.
//
// # Supervising the run
//
// Taking over is the start of the owner's job. Manager.Watch long-polls the run's close (bounded by
// WatchInterval, then a describe, so a close is seen within that interval):
//
//   - a run that continues as new is followed: the chain's current run is the one that heartbeats,
//     status and step-down name. Run.FirstRunID is the chain's first run; run-scoped actions on a chain
//     (StepDown, the reconciler's terminate) name it as the FirstExecutionRunId, which reaches the
//     chain's current run, and the server refuses them when the current run belongs to another chain;
//   - any other close (an operator's terminate or cancel, a workflow that returned, failed or timed
//     out) is returned as a *ClosedError; the owner (package ownership) replaces the run within its
//     term, at most ownership.Settings.MaxReplacements times, backing off with Config.RetryMin and
//     RetryMax, or resigns.
//
// On graceful step-down the owner calls StepDown while its term still holds: with TerminateOwnRun it
// terminates its own chain's current run; with LeaveRunning the successor's takeover does it. A
// superseded term terminates nothing.
//
// # What fencing cannot cover
//
// A start is a Temporal call, not an etcd transaction. The FAIL policy guarantees that a late start
// never ends another run; it can still open a run for an ended term when no other run is open. That run
// is terminated by the successor's takeover (it carries a lower token), by the late starter itself after
// its post-start check, and its side effects are fenced in the resource: Owner.ElectionKey at create
// revision Token is an exact-match lease that the dispatcher's ledger compares in the same etcd
// transaction as every write (see package dispatcher).
//
// Metrics (OpenTelemetry, injected MeterProvider): baton.takeover (counter by outcome and path),
// baton.takeover.latency (seconds from term start to the new run open), baton.takeover.terminations,
// baton.takeover.regressions and baton.takeover.run_closes (by status).
package takeover

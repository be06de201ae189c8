// Package ownership runs this process's ownership of one queue's dispatcher, term by term, and keeps
// the one record of it.
//
// For every term the election grants (Queue.Lead, the election's OnElected), a Queue takes the
// dispatcher over (takeover: terminate any prior run, start its own), then supervises it until the
// term ends: it heartbeats the chain's current run in Redis (heartbeat), follows continue-as-new,
// checks every progress interval that the run makes progress (package progress), replaces a run that
// closed behind its back (at most Settings.MaxReplacements per term, backed off with the takeover's
// RetryMin and RetryMax) and evicts the queue's dead workers (registry). A graceful resign
// (Queue.HandOver, OnResign) steps down as the takeover policy says; a step-down of any kind
// (Queue.SteppedDown) clears the term.
//
// # A takeover nobody can make succeed
//
// A takeover that fails in a way retrying cannot fix (takeover.ErrPermanent: the namespace deleted,
// permission denied) is not resigned at once: the next winner, milliseconds later, would fail the
// same way, and a fleet would pass the queue around as fast as etcd elects (hundreds of terms a
// second, each a few etcd writes, growing with the fleet). Nor is it kept for ever: the failure may
// be this worker's own (its credentials, its namespace setting) while the others' are fine. So:
//
//   - The term is kept for a hold, and the takeover is retried within it with backoff (the takeover's
//     RetryMin doubling up to Settings.PermanentHold): no etcd write per attempt, and a namespace that
//     comes back is taken over within about PermanentHold, by the worker that holds the queue.
//   - The hold grows with the queue's consecutive failed terms, counted across the fleet:
//     PermanentHold × 2^(n-1), at most PermanentHoldMax, for the n-th. The count lives in etcd, in
//     the queue's Failing record (FailingKeys; read and written by the failing term, fenced by it),
//     so the next winner, whichever worker it is, holds as long as the fleet's count says instead of
//     starting over: fleet-wide churn is one term per hold per queue whatever the number of workers,
//     a few per minute at first and one per PermanentHoldMax after a few minutes.
//   - When the hold is over the term is resigned with election.ErrStepAside: this worker stands again
//     only after the election's RetryMax, so another worker that serves the queue wins it and tries
//     with its own configuration; a worker that fails for reasons of its own costs the queue one hold.
//   - Readiness is red (Snapshot.Permanent, with the record's count and since when) on every worker
//     whose takeover of the queue failed, until one of its takeovers succeeds; the first success
//     anywhere deletes the record, and the count starts over. A record whose last failure is older
//     than twice PermanentHoldMax (a success whose delete failed) counts as none.
//
// Failures that retrying may fix (Temporal unreachable, a timeout) resign the term as before: another
// worker may reach Temporal where this one cannot.
//
// These bounds (Settings: MaxReplacements, PermanentHold, PermanentHoldMax) are this package's own:
// nothing else reads them, so they live here and not in takeover.Config, whose RetryMin and RetryMax
// the lifecycle shares with the takeover's own attempts. The root package exposes them as
// Config.Ownership and checks the rule that spans both: PermanentHold at least the takeover's
// RetryMax, so that a held term retries its takeover.
//
// What it learns is kept in one place, read with Queue.Snapshot: the root package's Status, its
// readiness and liveness checks, its metrics, IsLeading and Term all read it, and keep no copy.
//
// The lifecycle's collaborators are interfaces (Taker, Beater, Evictor, Balancer, the progress
// Probe) and its time comes from an injected clock, so that it is tested with fakes and a fake clock
// beside the real-server tests of the integration module. Balance, which decides who stands for a
// queue, and this package meet in one narrow interface: Balancer.
package ownership

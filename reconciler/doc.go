// Package reconciler cleans up what crashed dispatcher owners leave behind: their dispatcher runs in
// Temporal and their heartbeat entries in Redis, within the cleanup SLA (about StaleAfter + Interval
// after the last heartbeat: 30s + 1m with the defaults).
//
// # One cleaner per project
//
// Every process of a project runs a Reconciler, but only the winner of the project's reconciler
// election (an Elector of its own, under DefaultElectionPrefix) runs cycles: at once when it wins,
// then every Interval, jittered. Each irreversible action is fenced: before it terminates a run, the
// leader confirms its term in etcd, so a reconciler that lost its term mid-cycle stops instead of
// acting on a stale view. A leader that cannot complete its cycles (Redis or Temporal unreachable
// from it) resigns, so that a healthy candidate takes the job instead of cleanup going silent.
//
// # A cycle
//
// It SCANs the heartbeat keys (never KEYS; every master of a Redis Cluster), classifies each entry
// as active or stale by Redis server time, so that no host's clock is trusted, and for each stale
// entry whose queue has no leader at the same or a newer token: terminates exactly the entry's run,
// by its run ID (a run already closed or gone counts as done), then deletes the entry with a
// compare-and-delete that spares it if it was written again meanwhile. Terminations are rate limited.
// Entries Baton did not write are counted and logged, never acted on.
//
// Redis is not the only source of truth: it can lose keys. Each cycle also lists the project's open
// dispatcher runs from Temporal visibility, page by page, and terminates, by run ID, those whose
// queue has no leader or whose leader holds a newer token. Every listed run is judged against one
// read of the project's queue leaders taken after the listing, so a cycle's etcd cost does not grow
// with the number of open runs. A run whose owner cannot be decided is left alone and counted.
//
// # Orphans, as they happen
//
// Between cycles the leader watches the project's queue elections (election.Elector.WatchVacated).
// When a queue's last candidate key goes, its owner's lease expired with nobody in line, and the
// queue is still without a candidate OrphanGrace later (default 3 s, past balance's vacant-queue
// wait), the leader cleans up the run and heartbeat entry its owner left, through the same fenced,
// run-scoped path as a cycle: a crashed owner with no successor is gone about TTL + OrphanGrace after
// it died, not a minute later. A handover vacates nothing, and a queue that anyone stands for again
// within the grace is left to them; the cycle and the Temporal-side sweep stay the backstop.
// A queue vacated before the leader's term began (the whole fleet crashed, and the first worker back
// does not serve it) counts as vacated at the term's start: the term's first cycle hands the watch the
// project's live heartbeat entries, and those whose queue nobody leads (one read of the leaders) are
// cleaned OrphanGrace after the term began.
//
// # Observability
//
// Report says what a cycle saw and did (Last, OnCycle). After each completed cycle the leader also
// records it in etcd (LastCycle, at LastCycleKey, fenced by its term), so that a check outside every
// worker (`baton verify`) can tell that cleanup still runs, and date etcd revisions by it. The metrics are baton.dispatcher.active,
// baton.dispatcher.stale, baton.dispatcher.terminations and baton.dispatcher.cleanup_errors (the
// PRD's names under Baton's prefix), baton.reconcile.cycle.duration, baton.reconcile.cycles and
// baton.reconcile.last_success.age, whose alert says that cleanup has gone silent, and
// baton.dispatcher.orphans, the runs cleaned up between cycles.
//
// Applications rarely use this package directly: baton.Node runs it unless
// Config.DisableReconciler is set.
package reconciler

// Package registry is the worker registry of a project on Redis: workers register, heartbeat, drain
// and deregister; operators list and get them; each queue's leader evicts the dead.
//
// A worker registers with its server ID, task queue, hostname, pid, version, capabilities (for
// example the workflow types it runs), labels and max concurrency, and becomes ONLINE. It then
// heartbeats every HeartbeatInterval with its active count and the tasks it completed and failed
// since the previous heartbeat. Each heartbeat is one script call, whatever the number of workers:
// the script adds the deltas to the totals, stamps the heartbeat with the Redis server's own time
// (never a client's clock, so skewed hosts agree on ages), scores the worker by it in its queue's
// heartbeat sorted set, and answers the worker's status. That answer is how a worker learns that an
// operator asked it to drain (DRAINING). A worker that is not registered, or was deregistered or
// evicted, is told so (ErrNotRegistered) and registers again.
//
// A worker process keeps itself registered with a Member (NewMember: who it is, on which queues):
// its Run, owned by the process (a baton.Node runs it on its wait group), registers the worker on
// every queue, then heartbeats each queue every HeartbeatInterval on the Registry's clock. Each
// heartbeat carries the increase of the application's running totals (MemberConfig.Load) since the
// last heartbeat the registry took, so a refused one is sent again with the next. A heartbeat
// answered ErrNotRegistered (the leader evicted the worker, an operator deregistered it, Redis lost
// the record) makes the next round register the worker again on that queue; any other failure is
// kept (MemberState.Err), logged once, and retried at the next round. After each round the Member
// tells its Drainer (a *balance.Runner, wired by the Node) when the answers changed from "drain me"
// (DRAINING on any queue) to not, or back: once per change, so balance hears the registry directly,
// with no one relaying. State is what the Member last knew, for status pages.
//
// Deregister makes a worker OFFLINE; the record stays for Retention so that operators can see it,
// then expires. List pages through the workers of the project, optionally of one queue, status or
// capability, with a cursor that stays exact while workers register concurrently.
//
// The queue's leader (an election.Term) calls Evict periodically, for example every
// HeartbeatInterval. Workers whose last heartbeat is older than EvictAfter (default three intervals)
// become OFFLINE, and their records keep the leader's fencing token (Worker.EvictedBy), so that
// operators tell a crash (Worker.Evicted) from a clean stop. The comparison and the update happen in
// one script per batch, on the server's clock, so a worker that heartbeats in between is never
// evicted, and a superseded leader's eviction is harmless: it can only evict what is dead by the same
// rule, and is refused outright once a newer leader has evicted on the queue.
//
// Redis holds values anyone can write. A record with garbage in it never panics or stops List or
// Evict: List skips it, Get reports it (ErrMalformed, naming the key and the field), Evict still
// evicts the dead worker it belongs to, and every case is logged and counted.
//
// Keys (all of a project's keys share the hash tag {<project>}, so the scripts run on Redis Cluster
// too; names never contain '/', which separates the parts):
//
//	<Prefix>{<project>}/w/<queue>/<serverID>  hash: the worker's record
//	<Prefix>{<project>}/hb/<queue>            sorted set: live workers by last heartbeat (Redis ms)
//	<Prefix>{<project>}/idx                   sorted set (scores 0): "<queue>\x00<serverID>", for List
//	<Prefix>{<project>}/gone/<queue>          sorted set: OFFLINE workers by record expiry, for pruning
//	<Prefix>{<project>}/fence/<queue>         string: highest fencing token that evicted on the queue
//
// Metrics (OpenTelemetry, injected MeterProvider): baton.registry.evictions (by project and queue),
// baton.registry.heartbeats (by result), baton.registry.malformed (by operation).
package registry

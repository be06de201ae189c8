// Package sim is Baton's deterministic simulator: the real election code (and, through the other
// models, the rest of Baton) run against modelled servers inside a testing/synctest bubble, under
// faults drawn from a seed, with invariants checked at every step.
//
// One schedule is one seed. [Streams] splits the seed into named PRNG streams, so that drawing more
// from one (the network's) does not shift another (the faults'). The [Net] is the etcd model's
// transport: every request and stream message waits in it until the scheduler, at a moment when
// every goroutine of the bubble is durably blocked (synctest.Wait), picks the next one to deliver in
// a seeded order, with a seeded fate: delivered, delayed, reordered, dropped before it is applied,
// or applied with its response lost (the client sees codes.Unavailable after a detection delay, as a
// broken connection would show). A request whose caller gave up is still delivered: a real network
// does not recall a packet. Partitions hold a process's stream messages and drop its requests.
//
// The [World] of the election simulator runs 3-5 processes, each with a real election.Elector over
// its own clientv3 (etcdmodel.Model.NewClient), campaigning for and observing 1-8 queues for a minute
// of simulated time; faults are drawn per seed in the swarm style (each seed turns a different
// subset on, at different rates): crash, restart with a new server ID, a graceful stop (a rolling
// deploy's step: the next incarnation starts, the old one resigns and drains, in half the stops
// while its session runs out), partition, a stall longer than
// the TTL (everything to and from the process held: a pause as etcd sees it, though the process's own
// timers keep running), delays and reordering, lost requests and lost responses, an operator's lease
// revoke, a no-leader window, a raft-leader change, and an auto-compactor. A heal phase then turns
// every fault off and requires a leader per queue within a deadline. The invariants, checked after
// every step: one owner (at most one process whose term passes Check and whose key etcd holds with
// the term's token), fail closed (such a term's local deadline is never later than the server's
// expiry of its lease), no successor while a predecessor's callback still runs (unless an operator
// removed its lease), every fenced write committed only while its term's key held its token.
// "Sometimes" probes (a fenced write refused, a term lost to the local deadline, a no-leader window
// while a leader acted, a watch opened below the compaction, ...) must each be hit by a batch.
//
// The worlds share their parts rather than copy them: each embeds a stage (the seed's streams, the
// recorder, the Net, the etcd model, and the violations and probes it found), and the election and
// balance worlds keep their processes in a fleet of incarnations (proc: name, clock, client, real
// Elector), which crashes, restarts, replaces, deploys and stops them the same way in both.
//
// The trace of a schedule is a list of lines (deliveries, fates, faults, callbacks) whose hash is the
// schedule's fingerprint: running a seed twice and comparing the hashes measures replay fidelity.
// In-step goroutine interleaving is the Go runtime's and is not seeded (golang/go#67690). The
// scheduler only ever acts when the bubble is quiescent, and what it can, it puts in an order of its
// own: it orders what is pending by content (a watch's messages by its stream too); a fault or a phase
// change runs to a stop before the next delivery; the lines a step's goroutines add are settled in
// one canonical order (Recorder.Settle); each watch has a stream of its own (clientv3 resumes the
// watches of a shared stream in a Go map's order); proposals that waited for a raft leader
// apply in the order they arrived; a jitter drawn at one instant gets one value, whichever goroutine
// draws first. What is left is goroutines woken at one instant that race for something shared (which
// of a stopping process's queues is handed over first, a timer that fires at the instant of a
// delivery), so most election and reconciler schedules and about a third of the balance ones
// replay exactly; the batch reports how many did, and the ledger and takeover worlds, which leave
// nothing to the runtime, all.
//
// The carry world (CarryWorld, TestSimCarry) runs the real dispatcher Backlog activity, with its
// scan of the run log (a real takeover.EtcdRunLog on the etcd model), describes, continue-as-new
// links, visibility and each run's history, against the Temporal model with visibility lag and
// failing reads. The dispatcher runs are scripted from the seed and write the history the workflow
// would (signals, accepted updates, Backlog and Dispatch activities, continue-as-new carrying what
// waits): takeovers, late starts of superseded terms landing while no run is open, operator closes,
// runs terminated mid-activity. After the heal a last run reads its whole backlog; every request any
// run accepted must have been handled by some run.
//
// The reconciler world (ReconcilerWorld, TestSimReconciler) runs the real reconciler.Reconciler in
// every process, wired as a Node wires it: Reconciler.Run on an Elector of its own, the queues'
// Elector as its Leaders, the Redis model's client and a Temporal model client behind a faulty
// network of its own (with visibility lag and slow pages); the queues' owners are real election
// terms that take their dispatcher over with a real takeover.Manager and heartbeat it with a real
// heartbeat.Writer. Owners crash, pause past the TTL, are partitioned; Redis is flushed, given
// garbage, or down; the reconciler leader's lease is revoked mid-cycle; a queue is removed with its
// owner. Invariants, as each effect lands: the reconciler sends a terminate only while etcd holds its
// term, closes only runs whose owner's term etcd no longer holds, and never deletes the heartbeat
// entry of a term etcd holds. After the heal, within the reconciler's promise, no run or entry of a
// queue nobody stands for is left, and every leader's run is open.
//
// The node world (NodeWorld, TestSimNode) runs whole baton.Nodes: each process is baton.New and
// Node.Start with Config.Clock its seeded clock, over its own clientv3 on the etcd model, a go-redis
// client on the Redis model and a Temporal model client behind the reconciler world's Temporal
// network, adapted to the SDK's client.Client (explicit delegating methods for what the Node calls;
// what the model cannot answer is a violation). It is the reconciler world's servers, scheduler,
// faults and checks (it embeds ReconcilerWorld) with Nodes for processes, plus what only a Node
// has: a graceful stop (Quiesce, then Stop) and restart, rolling deploys to the next version, and
// an operator's drain in the registry; a crash cuts the process off from all three servers. At
// every step at most one Node acts as a queue's owner (its Term passes and etcd holds its key), and
// every start leaves while etcd holds its starter's term; after the heal, besides the reconciler
// world's promise, the registry lists exactly the live processes. Progress checks are off: the
// model has no task queues, and no worker runs the dispatcher.
//
// The dispatcher-run world (RunWorld, TestSimDispatcherRun) runs the reference dispatcher workflow
// itself, in the SDK's TestWorkflowEnvironment (one per run, chained by continue-as-new), with the
// real Dispatch and Backlog activities: a prior run's backlog read back while a storm of signals and
// Dispatch updates keeps continue-as-new due and every page comes back late; updates a draining run
// rejects are sent again to the next run, as dispatcher.Producer does; in some seeds the owner
// quiesces the run and steps down, and a new owner's run carries over from the ended chain's
// histories (mirrored into the Temporal model) through the real Backlog scan. Its time is the environment's mock
// clock, outside a bubble (RunDispatcherRun says why).
//
// Every world's batch (the election world here, the takeover world of tests/sim, ...) runs through
// [BatchFromEnv] and [Batch.Run], which hold the one environment contract: SIM_SEED (hex: replay one
// seed and write its timeline to SIM_TRACE or the test log), SIM_BUDGET (a Go duration, default DefaultBudget),
// SIM_SEEDS (a maximum seed count), SIM_FIRST, SIM_STOP=first and SIM_REPORT (a key=value file,
// [Report], read back with [ReadReport] by make sim-mutants and make bench's sim rows);
// each batch prints one summary line: schedules, schedules/s, simulated-to-real ratio, violations,
// replays identical, probes hit/missed. [ConformanceSeeds] gives the conformance tests their scripts
// under the same SIM_SEED and SIM_SEEDS.
package sim

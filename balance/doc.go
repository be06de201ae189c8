// Package balance spreads the leadership of many queues over the workers that campaign for them,
// without touching what makes an election safe.
//
// An etcd election is first come, first served: the worker that starts first, or that survives a
// rolling restart longest, would lead every queue. A Runner campaigns for a worker's queues and decides
// only whether and when the worker stands as a candidate; who wins among the candidates is still
// etcd's decision, and a term is still a term (fenced, ended on any doubt).
//
// The mechanism, from one watch on the project's election keys:
//
//   - Fair share is ceil(queues / workers), where workers counts the distinct server IDs among the
//     candidates of this worker's queues, and this worker.
//   - Vacant queues by rank: for a queue nobody stands for, the live workers are ordered by
//     rendezvous hashing of (queue, server ID); the first stands at once, the others only after
//     VacantWait (vacant.go). A fleet that starts together (each worker waits Settle first, to see
//     the others' member records), or the queues of a worker that died, spread evenly with about
//     one candidacy per queue, instead of every worker standing for every queue.
//   - Deferral: a worker that leads its fair share or more does not stand in line for other queues,
//     and withdraws its candidacy where it stands in line, so queues go to workers below their share.
//     Below its share a worker stands in line only behind a leader that may shed (one that leads
//     more than ShedAbove × fair share): elsewhere its candidacy would win it nothing.
//   - Shedding: a worker that leads more than ShedAbove × fair share resigns terms, one every
//     ShedInterval, but only of queues where another worker stands as candidate: each resignation is a
//     graceful handover to it.
//   - Always an owner: a queue with no other candidate is campaigned for, whatever the share (by
//     every worker at the latest VacantWait after it fell vacant), and is never shed or withdrawn
//     from. The gap between fair share (deferral) and ShedAbove × fair
//     share (shedding) keeps a queue from being passed back and forth.
//   - Leaders: each queue's Callbacks.OnNewLeader is called from the same watch, so that a worker
//     does not also observe every queue on a watch of its own (election.Run would).
//   - Idle queues cost no goroutine: a queue this worker does not stand for waits in one dispatching
//     goroutine, which starts the queue's campaign once the worker may stand (idle.go).
//
// A worker alone leads everything; as others join, the leaders above ShedAbove × fair share hand queues
// over until none is. With the default ShedAbove 1.25, no worker leads more than 1.25 × its fair share
// (plus one) once shedding settles.
//
// # Handovers and rolling deploys
//
// Every worker publishes a member record (version, start time, draining) and hands its queues over
// as follows; only forward-only depends on Config.Version (an empty version is never older or newer
// than another, so an unversioned worker takes no part in it).
//
//   - Designated successor. A leader that resigns a term (stop, drain, shed) names its successor in a
//     hint: the best worker by version (newest first), then fewest queues led (counting the ones it
//     has just named), then age (oldest first); a worker of a newer version counts even before it
//     stands anywhere (it has just started). The others defer to it for 2 × Grace, and the leader
//     waits, at most Grace, until the successor stands first in line behind it, so that etcd, which
//     elects the oldest candidate, elects it. Nothing more: the successor's campaign watches the key
//     in front of it from the current revision, which etcd serves at once, and catches a delete that
//     came before its watch by the watch's created notice. etcd still decides; a term is still a
//     term.
//   - Forward only (versioned workers). While workers of two versions are live (a rollout), a worker
//     never stands for a queue whose leader runs a newer version, and a worker newer than a queue's
//     leader stands in line for it, ready to be named. The successor is never older than the leader
//     when another exists.
//   - A calm balancer. No rebalancing moves during a rollout (the balance afterwards comes from where
//     the handovers land), and none while a candidate's member record is unknown. A queue held for
//     less than Cooldown is not shed; sheds are ShedInterval apart and at most MaxMoves per
//     MoveWindow; a queue whose takeover is under way (TakingOver) is never handed off.
//   - Small fleets spread. ceil(ShedAbove × fair share) lets 2 queues on 2 workers stay 2 and 0, so a
//     worker above ShedAbove × fair share itself also sheds to a worker in line that leads two fewer
//     (2 on 2 end 1 and 1, and nothing moves back). A worker within ShedAbove × fair share moves
//     nothing: after a stop-then-start deploy of 5 workers over 100 queues, 25, 25, 25, 25 and 0 stay
//     so, where spreading to the last new worker would move 20 queues a second time.
//   - Drain. SetDraining(true) (the registry's DRAINING status, in a Node) hands every queue over,
//     paced, each to a worker that stands for that queue: the workers that serve a queue stand when
//     its leader drains, and the draining worker names the first of them. Workers may serve
//     different queues: a queue no other worker stands for stays led by the draining worker, without
//     a gap, until one does (HandOverWaiting says so), where handing it to nobody would leave it
//     vacant and bring it back, again and again. The worker then stands only where nobody else
//     does, so no queue is left without an owner.
//   - Unfit. Unfit(queue) (a Node whose owner cannot reach Temporal for three progress checks) hands
//     that one queue over the same way, unpaced, to a worker that stands for it and reports in its
//     member record that its own Temporal client answered its last reach check (Config.Reach, every
//     ReachEvery), and keeps it when none does: during a Temporal outage every worker is unfit, and
//     a move would only cost a quiesce timeout, a failed terminate and a new run. Meanwhile the
//     leader asks the queue's workers to stand, HandOverWaiting says why the queue stays, and a
//     member record that changes (a worker reaches Temporal again) looks at the queue again. A
//     worker does so for a queue at most once per UnfitPause.
//
// A rolling deploy therefore moves each queue once when new workers start before old ones stop
// (surge). Stopping first, the first stopped worker's queues have no new worker to go to and move
// twice: 1 + 1/workers moves per queue with an even spread.
//
// # Decisions and state
//
// What a worker keeps about each of its queues is one record (record.go: held since when, takeovers
// under way, the last leader seen, the unfit marks), with its invariants. Every decision above is a
// function of what the Runner gathers from the view, the roster and that record at one instant,
// returning a decision the Runner acts on (decide.go): who stands behind a leader (mayStandBehind),
// how long a vacancy waits and who ranks first (vacancyWait, rankAmong), who takes a drained queue
// (firstTaker) or an unfit one (fitTaker), the successor (pickSuccessor), shed and drain
// (decideShed, then pace), unfit hand-overs (decideUnfit), their combination (decideHeld), why a stop
// hands over (stopReasonOf) and why a won queue changed owner (changeReason). They read no clock and
// take no lock, so their tests are tables on made-up time.
//
// Its keys live beside the election's, never under it, so no queue name collides (Keys has the
// layout: member records and hand-off hints).
//
// Metrics: MetricOwnerChanges counts queues won from another worker by reason (crash, resign, drain,
// shed, rollout, transfer, unfit); MetricLeading reports the queues a worker leads by version.
package balance

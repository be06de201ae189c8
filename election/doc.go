// Package election decides which process owns each (project, task queue), with etcd.
//
// A process creates one Elector over its etcd client. The Elector holds one session (an etcd lease)
// shared by every campaign of the process, so keepalive cost does not grow with the number of queues.
// Campaigns that need a session wait for one grant and share its outcome: a failed grant sends every
// one of them into its backoff at once, rather than each sending a grant of its own after it.
// Each (project, queue) is an election under <Prefix>/<project>/<queue>/; a candidate's key is named
// after its lease and the oldest key leads.
//
// The guarantees, and how they are kept:
//
//   - One owner. The session keeps its lease alive itself and records the time just before each
//     keepalive is sent. The acknowledged send time plus the granted TTL (the local deadline) is a
//     lower bound of the server's expiry; at that instant minus SafetyMargin every term of the session
//     ends. A leader that is partitioned, paused or slowed therefore stops before etcd can expire its
//     key and let a successor win. The margin is for the old leader to finish: the lost session
//     revokes its lease only once the OnElected callbacks of its ended terms have returned (those the
//     loss ended, and those of terms resigned before it whose callbacks still drain), or at the local
//     deadline, whichever comes first (terms from a bare Campaign have no callback and delay nothing).
//     A graceful Resign ends the term before the key is deleted. The one exception is a
//     key deleted or a lease revoked from outside (an operator): etcd can elect a successor before
//     the old leader hears of it, milliseconds later; fencing keeps that case harmless.
//   - Fenced actions. A win is verified with a linearizable read before the Term is handed out. The
//     Term's fencing token is the create revision of its key; Term.Guard commits etcd operations only
//     while the key still has that revision, so a superseded leader's write is refused by etcd itself.
//     The Elector's own deletes of candidate keys compare the create revision too, never the lease
//     alone: a delete held in flight from a failed campaign must not remove the key a later campaign
//     of the same session put again.
//   - Fail closed. A term ends on every doubt: session lost, lease not found, deadline margin reached,
//     key deleted or replaced, resign, Close. Term.Check is synchronous, so a process resumed after a
//     pause refuses to act before its watchdog goroutine runs.
//   - Nothing left behind. A lost session's lease holds the keys of every queue the process stood
//     for, and an etcd that elects a new raft leader extends every lease by its TTL. The revoke is
//     therefore retried (jittered, at most a second apart) until etcd answers, for as long as the
//     lease may live on the server, so the keys go as soon as etcd can be reached again. Close stops
//     these retries and waits for them. About once a TTL the session also compares what etcd attaches
//     to its lease with what the Elector knows (a restore of etcd can bring keys back): a key of an
//     election it neither campaigns for nor leads is deleted, unless Run's callback of an ended term
//     of that election still runs, so a draining leader's key is never swept.
//
// Run wraps Campaign in a loop with callbacks in the spirit of client-go's leaderelection: OnElected
// with the term's context, OnStepDown always after a term, OnNewLeader for observers. It campaigns
// again after a loss with jittered backoff on a fresh session. After a term whose OnElected returned
// an error it backs off too (RetryMin doubling to RetryMax, reset by a term that did not fail), so a
// leader that cannot do its job (a wrong Temporal namespace) does not campaign, fail and resign in a
// hot loop; a callback whose error wraps ErrStepAside stays out for RetryMax, so that the other
// candidates go first. When its context ends Run hands a held term over in this order: OnResign while the term
// still holds, at most HandOverTimeout (the leader lets its dispatcher run's handlers finish and ends
// the run); the term ends (its context is cancelled with
// ErrResigned); Run waits for OnElected to return, at most ResignTimeout; only then is the key
// deleted, so a follower takes over in milliseconds instead of after the TTL, yet never while the
// old leader still acts. A process that stops with many terms hands them all over in one round, at
// most MaxHandOvers at once (each in its own slot from OnResign to the delete of its key, its
// HandOverTimeout counted from the slot), so that nothing in a stop is serial in the number of
// queues and ten thousand hand-overs do not flood etcd and Temporal together. Term.Resign, for callers of Campaign, ends the term and deletes the key at
// once: such callers stop their own work under the term first.
//
// A typical leader:
//
//	el, err := election.New(etcdClient, election.Config{Logger: logger})
//	if err != nil {
//		return err
//	}
//	defer el.Close(ctx)
//	return el.Run(ctx, "billing", "orders", serverID, election.Callbacks{
//		OnElected: func(ctx context.Context, term *election.Term) error {
//			// Act as leader until ctx is done; fence etcd writes with term.Guard and
//			// hand term.Token() to every other side effect.
//			<-ctx.Done()
//			return nil
//		},
//	})
package election

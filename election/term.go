package election

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/event"
)

// Term is one tenure as leader of a (project, queue). It is handed out only after etcd confirmed, with
// a linearizable read, that this process's key is the oldest candidate. Its context is cancelled, and
// Done closed, on any loss: session lost, lease deadline margin reached, key deleted or replaced,
// resign, or Close. Every side effect a leader takes in etcd should go through Guard.
type Term struct {
	elector *Elector
	session *session
	project string
	queue   string
	key     string
	token   int64
	value   string
	started time.Time
	log     *zap.Logger

	ctx    context.Context
	cancel context.CancelCauseFunc

	// callbackDone is closed when the leader callback that Run started for this term has returned. A
	// lost session waits for it (bounded by its lease deadline) before revoking the lease, so that the
	// margin before the server's expiry is spent letting the old leader finish, not on a successor.
	// nil for a term from Campaign: nobody runs under it that this package knows of.
	callbackDone chan struct{}
	// claims counts what keeps the election claimed (Elector.claim) for this term: the term until it
	// ends and, for a term of Run, its callback until it returns. The claim is what stands behind the
	// key for the session's sweep (sweepStray): a key whose old leader still acts must not be swept.
	claims atomic.Int32

	once    sync.Once
	mu      sync.Mutex
	endedAt time.Time
}

// Project returns the project the term leads.
func (t *Term) Project() string { return t.project }

// Queue returns the task queue the term leads.
func (t *Term) Queue() string { return t.queue }

// event is an Event of kind k about the term, at its clock's now.
func (t *Term) event(k event.Kind) event.Event {
	return event.Event{Kind: k, At: t.elector.cfg.Clock.Now(), Project: t.project, Queue: t.queue, ServerID: t.value,
		Key: t.key, Token: t.token}
}

// Key returns this process's candidate key in etcd.
func (t *Term) Key() string { return t.key }

// Token returns the fencing token: the create revision of the candidate key. It grows with every
// new term of the same (project, queue), across processes.
func (t *Term) Token() int64 { return t.token }

// LeaderID returns the value the term campaigned with, normally the server ID.
func (t *Term) LeaderID() string { return t.value }

// Context returns a context cancelled when the term ends; context.Cause tells why.
func (t *Term) Context() context.Context { return t.ctx }

// Done returns a channel closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.ctx.Done() }

// Err returns nil while the term is alive, otherwise why it ended (ErrResigned, ErrKeyLost,
// ErrClosed, or an error wrapping ErrSessionLost).
func (t *Term) Err() error {
	if t.ctx.Err() == nil {
		return nil
	}
	return context.Cause(t.ctx)
}

// Started returns when the term began: after the verifying read confirmed the win.
func (t *Term) Started() time.Time { return t.started }

// Ended returns when the term ended, recorded before its context was cancelled.
func (t *Term) Ended() (time.Time, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.endedAt, !t.endedAt.IsZero()
}

// ValidUntil returns the instant by which the term ends unless the session's next keepalive succeeds.
func (t *Term) ValidUntil() time.Time { return t.session.validUntil() }

// Check returns nil while the term may act: its context is alive and the local lease deadline minus
// the safety margin has not passed. It is synchronous, so a process resumed after a long pause sees
// ErrNotLeader before its watchdog goroutine gets to run.
func (t *Term) Check() error {
	if t.ctx.Err() != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, context.Cause(t.ctx))
	}
	if err := t.session.err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	return nil
}

// HeldCmp is the comparison that holds exactly while the term whose election key is key and whose
// token is token holds: the key exists with that create revision. Once a successor wins, the key is
// gone or was created again at a higher revision, and the comparison fails for ever. It is Baton's
// one fencing comparison: Term.Guard, the term's own delete, and every fenced write of a dispatcher
// run (ledger.OwnerCmps) put it in their transaction's If.
func HeldCmp(key string, token int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(key), "=", token)
}

// LeadsCmp is the comparison that holds while no candidate of key's election is older than the
// term of token: every key under the election's candidate prefix (Keys.Candidates) has a create
// revision of at least token. In a history that only moves forward HeldCmp implies it (a successor
// wins only once every older key is gone, and no key is ever created again at an older revision). A
// restore from a backup breaks that: it brings a predecessor's key back with its lease, older than
// the successor's, while the successor's own key keeps its token, and a predecessor that had not
// heard of its loss goes on. Term.Guard compares both, so that only the oldest acts.
func LeadsCmp(key string, token int64) clientv3.Cmp {
	candidates := CandidatePrefix(key)
	return clientv3.Compare(clientv3.CreateRevision(candidates), ">", token-1).WithRange(clientv3.GetPrefixRangeEnd(candidates))
}

// CandidatePrefix is the prefix of every candidate key of the election of key, a candidate key:
// Keys.Candidates of its project and queue.
func CandidatePrefix(key string) string { return key[:strings.LastIndex(key, "/")+1] }

// OldestOp reads the oldest candidate key of key's election (keys only): what a transaction whose
// LeadsCmp failed reads in its Else to say why (LeadsIn).
func OldestOp(key string) clientv3.Op {
	return clientv3.OpGet(CandidatePrefix(key), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// LeadsIn is LeadsCmp read back from OldestOp's answer kvs: whether no candidate is older than the
// term of token.
func LeadsIn(kvs []*mvccpb.KeyValue, token int64) bool {
	return len(kvs) == 0 || kvs[0].CreateRevision >= token
}

// HeldIn is HeldCmp read back: whether kvs, what a Get of the election key returned, show it held by
// the term of token. A transaction whose HeldCmp failed reads the key in its Else to say why.
func HeldIn(kvs []*mvccpb.KeyValue, token int64) bool {
	return len(kvs) == 1 && kvs[0].CreateRevision == token
}

// Guard commits ops in one etcd transaction only while the term's key still exists at the term's
// revision and no older candidate's key exists (HeldCmp, LeadsCmp). It returns an error wrapping
// ErrNotLeader, and ends the term, when that is no longer so; nothing is written then.
func (t *Term) Guard(ctx context.Context, ops ...clientv3.Op) (*clientv3.TxnResponse, error) {
	if err := t.Check(); err != nil {
		return nil, err
	}
	resp, err := t.elector.client.Txn(ctx).
		If(HeldCmp(t.key, t.token), LeadsCmp(t.key, t.token)).
		Then(ops...).
		Commit()
	if err != nil {
		return nil, fmt.Errorf("election: guarded transaction for %s: %w", t.key, err)
	}
	if !resp.Succeeded {
		t.end(ErrKeyLost)
		return resp, fmt.Errorf("%w: key %s no longer at revision %d", ErrNotLeader, t.key, t.token)
	}
	return resp, nil
}

// Confirm asks etcd, with a guarded transaction that writes nothing, whether the term still holds.
// Callers confirm right before an irreversible side effect outside etcd (terminating a workflow run):
// it returns an error wrapping ErrNotLeader once a successor may exist.
func (t *Term) Confirm(ctx context.Context) error {
	_, err := t.Guard(ctx)
	return err
}

// Resign ends the term (its context is cancelled with ErrResigned) and then deletes its key, so a
// follower wins at once instead of after the TTL. The term is over before the delete is sent, but
// Resign does not wait for anything still running under the term's context: a caller of Campaign
// stops and waits for its own work first. Run does this for OnElected: it ends the term, waits for
// OnElected to return (bounded by ResignTimeout), and only then deletes the key.
func (t *Term) Resign(ctx context.Context) error {
	t.end(ErrResigned)
	return t.deleteKey(ctx)
}

// deleteKey deletes the term's key if it is still at the term's revision.
func (t *Term) deleteKey(ctx context.Context) error {
	_, err := t.elector.client.Txn(ctx).
		If(HeldCmp(t.key, t.token)).
		Then(clientv3.OpDelete(t.key)).
		Commit()
	if err != nil {
		return fmt.Errorf("election: resign %s: %w", t.key, err)
	}
	return nil
}

// end records the end time, cancels the context and drops the term's claim on the election. Only the
// first call counts.
func (t *Term) end(cause error) {
	t.once.Do(func() {
		t.mu.Lock()
		t.endedAt = t.elector.cfg.Clock.Now()
		t.mu.Unlock()
		t.cancel(cause)
		t.session.removeTerm(t)
		t.unclaim()
		t.log.Info("leadership ended", zap.Error(cause), zap.Duration("held", t.endedAt.Sub(t.started)))
		e := t.event(event.TermEnded)
		e.At, e.Started, e.Reason, e.Err = t.endedAt, t.started, EndReason(cause), event.ErrText(cause)
		t.elector.cfg.Events.Emit(e)
	})
}

// watch ends the term when its key is deleted or replaced behind its back (an operator, a revoked
// lease). It covers every revision from fromRev, the revision after the verifying read, so nothing is
// missed.
func (t *Term) watch(fromRev int64) {
	backoff := t.elector.cfg.RetryMin
	for t.ctx.Err() == nil {
		next, lost := t.watchOnce(fromRev)
		if lost {
			t.end(ErrKeyLost)
			return
		}
		if t.ctx.Err() != nil {
			return
		}
		// The watch broke (etcd lost its raft leader, compaction, connection): look again after a
		// pause. The session watchdog covers the time etcd cannot answer at all.
		if !t.elector.sleep(t.ctx, clock.Jitter(t.elector.cfg.Clock, backoff)) {
			return
		}
		backoff = min(2*backoff, t.elector.cfg.RetryMax)
		fromRev = next
	}
}

// stillOurs reads the key: false when it is gone or no longer the term's.
func (t *Term) stillOurs() (ok bool, rev int64, err error) {
	resp, err := t.elector.client.Get(t.ctx, t.key)
	if err != nil {
		return false, 0, err
	}
	kvs := resp.Kvs
	return HeldIn(kvs, t.token) && kvs[0].Lease == int64(t.session.id), resp.Header.Revision, nil
}

// watchOnce watches the key from the current revision, not from fromRev: a watch from a past revision
// joins etcd's "unsynced" watchers, which etcd catches up every 100 ms by reading every event since
// the oldest of them, and a process that wins thousands of queues at once would keep that scan busy.
// The watch's created notice says whether anything was written since fromRev; only then is the key
// read again. next is the first revision not yet covered.
func (t *Term) watchOnce(fromRev int64) (next int64, lost bool) {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(t.ctx))
	defer cancel()
	next = fromRev
	for resp := range t.elector.client.Watch(ctx, t.key, clientv3.WithCreatedNotify()) {
		if resp.Err() != nil {
			return next, false
		}
		if resp.Created {
			if resp.Header.Revision >= next {
				ours, rev, err := t.stillOurs()
				if err != nil {
					return next, false
				}
				if !ours {
					return next, true
				}
				next = max(next, rev+1)
			}
			continue
		}
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete || ev.Kv.CreateRevision != t.token || ev.Kv.Lease != int64(t.session.id) {
				return next, true
			}
		}
		next = max(next, resp.Header.Revision+1)
	}
	return next, false
}

// EndReason classifies why a term ended (its cause, as Term.Context's cause or OnStepDown's): one
// of event.EndedResigned, EndedSessionLost, EndedKeyLost, EndedClosed or EndedOther. It is the
// event.TermEnded reason and the cause label of the Node's step-down metric.
func EndReason(cause error) string {
	switch {
	case errors.Is(cause, ErrResigned):
		return event.EndedResigned
	case errors.Is(cause, ErrSessionLost):
		return event.EndedSessionLost
	case errors.Is(cause, ErrKeyLost):
		return event.EndedKeyLost
	case errors.Is(cause, ErrClosed):
		return event.EndedClosed
	}
	return event.EndedOther
}

// callbackReturned marks the term's leader callback (Run's) as returned: a lost session's revoke no
// longer waits for it, and the election is released once the term has ended too.
func (t *Term) callbackReturned() {
	close(t.callbackDone)
	t.session.callbackReturned(t)
	t.unclaim()
}

// unclaim drops one of the term's claims and releases the election with the last.
func (t *Term) unclaim() {
	if t.claims.Add(-1) == 0 {
		t.elector.release(t.project, t.queue)
	}
}

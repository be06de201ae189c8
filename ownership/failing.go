package ownership

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// Failing is the fleet's record of a queue whose takeover fails in a way that retrying cannot fix
// (takeover.ErrPermanent): the term that fails keeps it in etcd (Failures) so that the next winner,
// whichever worker it is, holds its own term as long as the fleet's count says instead of starting
// over. A takeover that succeeds clears it.
type Failing struct {
	// Since is when the first of these consecutive failed terms failed (its writer's clock).
	Since time.Time `json:"since"`
	// At is when the last of them failed (its writer's clock): a record older than twice
	// PermanentHoldMax belongs to an episode that ended, and counts as none.
	At time.Time `json:"at"`
	// Terms counts the consecutive failed terms, the last included.
	Terms int `json:"terms"`
	// ServerID and Token are the last failed term's holder and fencing token; Reason its failure.
	ServerID string `json:"server_id"`
	Token    int64  `json:"token"`
	Reason   string `json:"reason"`
}

// FailingKeys is the layout of the failing records in etcd, defined here once; tools and tests read
// them through it. They live beside the project's election keys, never under them (a key under an
// election would stand in its line):
//
//	<ElectionPrefix>-failing/<project>/<queue>   queue's Failing record (JSON), on no lease
//
// A record has no lease on purpose: a fleet restarted while the namespace is still gone keeps its
// count. A takeover that succeeds deletes it; one left by a queue that no worker serves any more
// lingers (a few hundred bytes) until an operator deletes it, and is never read.
type FailingKeys struct {
	// ElectionPrefix is the queue elections' prefix (election.Config.Prefix).
	ElectionPrefix string
}

// Project returns the range every failing record of project starts with.
func (k FailingKeys) Project(project string) string {
	return k.ElectionPrefix + "-failing/" + project + "/"
}

// Queue returns the key of queue's failing record.
func (k FailingKeys) Queue(project, queue string) string { return k.Project(project) + queue }

// Failures is where a queue's Failing record is shared with the workers that may lead it next
// (*EtcdFailures). Writes are fenced by the term: a superseded leader changes nothing.
type Failures interface {
	// Load returns the record of term's queue, and false when there is none.
	Load(ctx context.Context, term takeover.Term) (Failing, bool, error)
	// Save writes rec as the record of term's queue while term holds; Clear deletes it.
	Save(ctx context.Context, term takeover.Term, rec Failing) error
	Clear(ctx context.Context, term takeover.Term) error
}

// EtcdFailures keeps the failing records in etcd, under FailingKeys.
type EtcdFailures struct {
	client *clientv3.Client
	keys   FailingKeys
}

var _ Failures = (*EtcdFailures)(nil)

// NewEtcdFailures returns the failing records of the elections under keys.ElectionPrefix.
func NewEtcdFailures(client *clientv3.Client, keys FailingKeys) *EtcdFailures {
	return &EtcdFailures{client: client, keys: keys}
}

// Load reads the record of term's queue (a linearizable read).
func (f *EtcdFailures) Load(ctx context.Context, term takeover.Term) (Failing, bool, error) {
	key := f.keys.Queue(term.Project(), term.Queue())
	resp, err := f.client.Get(ctx, key)
	if err != nil {
		return Failing{}, false, fmt.Errorf("ownership: read %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return Failing{}, false, nil
	}
	var rec Failing
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return Failing{}, false, fmt.Errorf("ownership: read %s: %w", key, err)
	}
	return rec, true, nil
}

// Save writes rec while term holds.
func (f *EtcdFailures) Save(ctx context.Context, term takeover.Term, rec Failing) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	return f.fenced(ctx, term, clientv3.OpPut(f.keys.Queue(term.Project(), term.Queue()), string(b)))
}

// Clear deletes the record while term holds. Every term that takes over clears, so it looks first
// with a serializable read (answered by the local member, no raft round) and deletes only a record
// that exists: a takeover that follows no failure costs etcd no write, which counts when a fleet
// starts and takes thousands of queues over at once. A record the read missed (one written a
// moment ago, not yet applied by that member) lives on until it is stale (twice PermanentHoldMax).
func (f *EtcdFailures) Clear(ctx context.Context, term takeover.Term) error {
	key := f.keys.Queue(term.Project(), term.Queue())
	resp, err := f.client.Get(ctx, key, clientv3.WithSerializable(), clientv3.WithCountOnly())
	if err != nil {
		return fmt.Errorf("ownership: read %s: %w", key, err)
	}
	if resp.Count == 0 {
		return nil
	}
	return f.fenced(ctx, term, clientv3.OpDelete(key))
}

func (f *EtcdFailures) fenced(ctx context.Context, term takeover.Term, op clientv3.Op) error {
	resp, err := f.client.Txn(ctx).If(election.HeldCmp(term.Key(), term.Token())).Then(op).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("ownership: failing record of %s: %w", term.Queue(), err)
	case !resp.Succeeded:
		return fmt.Errorf("ownership: failing record of %s: %w", term.Queue(), election.ErrNotLeader)
	}
	return nil
}

// nextFailing is the record of term, whose takeover has just failed for good at now (cause), after
// prev, the queue's record when found: one more consecutive failed term, unless prev is stale (its
// last failure more than staleAfter ago) or not an earlier term's.
func nextFailing(prev Failing, found bool, now time.Time, staleAfter time.Duration, term takeover.Term, cause error) Failing {
	rec := Failing{Since: now, At: now, Terms: 1, ServerID: term.LeaderID(), Token: term.Token(), Reason: cause.Error()}
	if found && prev.Token < term.Token() && now.Sub(prev.At) <= staleAfter {
		rec.Since, rec.Terms = prev.Since, prev.Terms+1
	}
	return rec
}

// holdFor is how long the terms-th consecutive failed term is kept: base × 2^(terms-1), at most
// maximum.
func holdFor(terms int, base, maximum time.Duration) time.Duration {
	d := base
	for i := 1; i < terms && d < maximum; i++ {
		d *= 2
	}
	return min(d, maximum)
}

// staleAfter is how old a failing record's last failure may be and still count: consecutive failed
// terms follow each other within a hold (at most PermanentHoldMax) and an election's pause.
func (q *Queue[T]) staleAfter() time.Duration { return 2 * q.cfg.PermanentHoldMax }

// hold keeps a term whose takeover failed for good (first) and retries the takeover, RetryMin
// doubling up to PermanentHold apart, for as long as the queue's record says: PermanentHold ×
// 2^(n-1), at most PermanentHoldMax, for its n-th consecutive failed term across the fleet. It
// returns the run of a takeover that succeeded, or the error that resigns the term (the hold is over,
// or a takeover failed in a way retrying may fix); held is false when the term ended meanwhile.
func (q *Queue[T]) hold(ctx context.Context, term T, take takeFunc, first error) (run takeover.Run, held bool, err error) {
	rec := q.failed(ctx, term, first)
	hold := holdFor(rec.Terms, q.cfg.PermanentHold, q.cfg.PermanentHoldMax)
	until := q.clk.Now().Add(hold)
	q.log.Warn("dispatcher takeover cannot succeed; keeping the term and retrying with backoff", zap.String("queue", q.cfg.Queue),
		zap.Int64("token", term.Token()), zap.Time("failing_since", rec.Since), zap.Int("failed_terms", rec.Terms),
		zap.Duration("hold", hold), zap.Error(first))
	err = first
	for backoff := q.cfg.Takeover.RetryMin; ; backoff = min(2*backoff, q.cfg.PermanentHold) {
		left := until.Sub(q.clk.Now())
		if left <= 0 {
			return takeover.Run{}, true, fmt.Errorf("baton: dispatcher takeover failed for good for %v of this term, the queue's failed term %d in a row since %s; resigning so that another worker can try: %w: %w",
				hold, rec.Terms, rec.Since.UTC().Format(time.RFC3339), election.ErrStepAside, err)
		}
		if !clock.Sleep(ctx, q.clk, min(clock.Jitter(q.clk, backoff), left)) {
			return takeover.Run{}, false, nil
		}
		if run, err = q.take(ctx, term, take); !errors.Is(err, takeover.ErrPermanent) {
			return run, true, err // a success, or a failure that retrying may fix: the term's usual course
		}
	}
}

// failed records term's first failure that retrying cannot fix (cause) as one more failed term of
// the queue, in its shared record when there is one, and returns the record.
func (q *Queue[T]) failed(ctx context.Context, term T, cause error) Failing {
	q.mu.Lock()
	prev, found := q.st.failing, q.st.failing.Terms > 0
	q.mu.Unlock()
	if q.cfg.Failures != nil {
		shared, ok, err := q.cfg.Failures.Load(ctx, term)
		if err == nil {
			prev, found = shared, ok
		} else if ctx.Err() == nil {
			q.log.Warn("failing record not read; counting this worker's failed terms only", zap.String("queue", q.cfg.Queue), zap.Error(err))
		}
	}
	rec := nextFailing(prev, found, q.clk.Now(), q.staleAfter(), term, cause)
	if q.cfg.Failures != nil {
		if err := q.cfg.Failures.Save(ctx, term, rec); err != nil && ctx.Err() == nil {
			q.log.Warn("failing record not written; the next winner counts from its own", zap.String("queue", q.cfg.Queue), zap.Error(err))
		}
	}
	q.update(func(s *state[T]) { s.failing = rec })
	return rec
}

// recovered clears the queue's failing record after term's takeover succeeded.
func (q *Queue[T]) recovered(ctx context.Context, term T) {
	var was Failing
	q.update(func(s *state[T]) { was, s.failing = s.failing, Failing{} })
	if q.cfg.Failures == nil {
		return
	}
	if err := q.cfg.Failures.Clear(ctx, term); err != nil && ctx.Err() == nil {
		q.log.Warn("failing record not cleared; it counts as none once stale", zap.String("queue", q.cfg.Queue), zap.Error(err))
		return
	}
	if was.Terms > 0 {
		q.log.Info("dispatcher takeover succeeds again", zap.String("queue", q.cfg.Queue), zap.Int64("token", term.Token()),
			zap.Time("failing_since", was.Since), zap.Int("failed_terms", was.Terms))
	}
}

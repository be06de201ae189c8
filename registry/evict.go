package registry

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/names"
)

// Term is what Evict needs of the queue leader's election term; *election.Term satisfies it.
type Term interface {
	// Check is the local, synchronous test that the term may act.
	Check() error
	// Token is the term's fencing token.
	Token() int64
}

// Evict is run by the queue's leader: workers of queue whose last heartbeat, by Redis server time,
// is older than EvictAfter become OFFLINE, leave the heartbeat set and expire after Retention. It
// returns how many it evicted.
//
// Candidates are read oldest first, EvictBatch at a time, and each batch is evicted by one script
// that compares every heartbeat with the server's time again: a worker that heartbeated after it was
// listed is never evicted. A superseded leader can therefore only evict workers that are dead by the
// same rule; and once a leader with a higher fencing token has evicted on the queue, a lower token is
// refused (ErrSuperseded). The term is checked before every batch (ErrNotLeader).
//
// A dead worker is evicted even when its record is malformed; a heartbeat entry that is not a valid
// server ID is removed once stale. Both are logged and counted. Evict also prunes the index entries of
// OFFLINE records that have expired.
func (r *Registry) Evict(ctx context.Context, term Term, queue string) (int, error) {
	if term == nil {
		return 0, fmt.Errorf("%w: term must not be nil", ErrInvalidArgument)
	}
	if err := names.Check(queue); err != nil {
		return 0, fmt.Errorf("%w: queue %s %v", ErrInvalidArgument, names.Quote(queue), err)
	}
	log := r.log.With(zap.String("queue", queue), zap.Int64("token", term.Token()))
	hb := r.keys.heartbeats(queue)
	evicted := 0
	for {
		if err := term.Check(); err != nil {
			return evicted, fmt.Errorf("%w: %w", ErrNotLeader, err)
		}
		var now *redis.TimeCmd
		var oldest *redis.ZSliceCmd
		_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			now = p.Time(ctx)
			oldest = p.ZRangeWithScores(ctx, hb, 0, int64(r.cfg.EvictBatch-1))
			return nil
		})
		switch {
		case isWrongType(oldest.Err()):
			r.m.malformedSeen(ctx, "evict", 1)
			return evicted, fmt.Errorf("%w: key %s: the heartbeat set is not a sorted set", ErrMalformed, hb)
		case err != nil:
			return evicted, fmt.Errorf("registry: evict %s: %w", queue, err)
		}
		cutoff := float64(now.Val().UnixMilli() - r.cfg.EvictAfter.Milliseconds())
		var stale []string
		for _, z := range oldest.Val() {
			if z.Score >= cutoff {
				break // oldest first: the rest are fresher
			}
			stale = append(stale, fmt.Sprint(z.Member))
		}
		if len(stale) == 0 {
			break
		}
		n, removed, err := r.evictBatch(ctx, log, term, queue, stale)
		evicted += n
		if err != nil {
			return evicted, err
		}
		// Stop when the batch held fresh entries too (there are no more stale ones), and when nothing
		// was removed (the server's clock disagrees with the one read above; the next pass retries).
		if removed == 0 || len(stale) < len(oldest.Val()) {
			break
		}
	}
	if err := term.Check(); err != nil {
		return evicted, fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	if err := r.pruneGone(ctx, queue); err != nil {
		// Housekeeping only: the entries stay listed as absent (List skips them) until the next pass.
		log.Warn("could not prune index entries of expired records", zap.Error(err))
	}
	return evicted, nil
}

// evictBatch runs evictScript on stale members. It returns the workers evicted and the heartbeat
// entries removed (evicted workers and garbage entries).
func (r *Registry) evictBatch(ctx context.Context, log *zap.Logger, term Term, queue string, stale []string) (evicted, removed int, err error) {
	keys := []string{r.keys.heartbeats(queue), r.keys.fence(queue), r.keys.gone(queue)}
	var valid, garbage []any
	for _, m := range stale {
		if names.Check(m) != nil {
			garbage = append(garbage, m)
			continue
		}
		valid = append(valid, m)
		keys = append(keys, r.keys.worker(queue, m))
	}
	args := append([]any{term.Token(), r.cfg.EvictAfter.Milliseconds(), r.cfg.Retention.Milliseconds(), len(valid)}, valid...)
	res, err := evictScript.Run(ctx, r.rdb, keys, append(args, garbage...)...).Slice()
	if err != nil {
		return 0, 0, fmt.Errorf("registry: evict %s: %w", queue, err)
	}
	switch replyCode(res) {
	case 1:
	case -1:
		return 0, 0, fmt.Errorf("%w: queue %s was evicted on by token %s; ours is %d", ErrSuperseded, queue, replyString(res, 1), term.Token())
	default:
		return 0, 0, fmt.Errorf("registry: evict %s: unexpected script reply %v", queue, res)
	}
	malformed := 0
	for i := 2; i+2 < len(res); i += 3 {
		member, kind := replyString(res, i), replyString(res, i+2)
		ageMs, _ := strconv.ParseInt(replyString(res, i+1), 10, 64)
		age := time.Duration(ageMs) * time.Millisecond
		removed++
		switch kind {
		case "garbage":
			malformed++
			log.Warn("removed a stale heartbeat entry that is not a valid server ID",
				zap.String("key", r.keys.heartbeats(queue)), zap.String("entry", names.Quote(member)), zap.Duration("last_heartbeat_age", age))
			continue
		case "hash", "none":
			log.Info("worker evicted", zap.String("server_id", member), zap.Duration("last_heartbeat_age", age),
				zap.Bool("record_missing", kind == "none"))
			r.evicted(queue, term, member)
		default:
			malformed++
			log.Warn("worker evicted; its record is malformed and expires after the retention", zap.String("server_id", member),
				zap.Duration("last_heartbeat_age", age), zap.String("key", r.keys.worker(queue, member)), zap.String("record_type", kind))
			r.evicted(queue, term, member)
		}
		evicted++
	}
	if evicted > 0 {
		r.m.evicted(ctx, queue, evicted)
	}
	if malformed > 0 {
		r.m.malformedSeen(ctx, "evict", malformed)
	}
	return evicted, removed, nil
}

// pruneGone removes, in one batch, the index entries of the queue's OFFLINE workers whose record has
// expired.
func (r *Registry) pruneGone(ctx context.Context, queue string) error {
	gone := r.keys.gone(queue)
	var now *redis.TimeCmd
	var due *redis.ZSliceCmd
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		now = p.Time(ctx)
		due = p.ZRangeWithScores(ctx, gone, 0, int64(r.cfg.EvictBatch-1))
		return nil
	})
	switch {
	case isWrongType(due.Err()):
		// Rebuilt by the next deregistration or eviction.
		return fmt.Errorf("%w: key %s: not a sorted set", ErrMalformed, gone)
	case err != nil:
		return err
	}
	keys := []string{gone, r.keys.index()}
	var args, garbage []any
	for _, z := range due.Val() {
		if z.Score > float64(now.Val().UnixMilli()) {
			break
		}
		id := fmt.Sprint(z.Member)
		if names.Check(id) != nil {
			garbage = append(garbage, id)
			continue
		}
		keys = append(keys, r.keys.worker(queue, id))
		args = append(args, id, indexMember(queue, id))
	}
	if len(garbage) > 0 {
		// Nothing this package writes: an entry that names no record is simply dropped.
		r.m.malformedSeen(ctx, "evict", len(garbage))
		if err := r.rdb.ZRem(ctx, gone, garbage...).Err(); err != nil {
			return err
		}
	}
	if len(args) == 0 {
		return nil
	}
	return pruneGoneScript.Run(ctx, r.rdb, keys, args...).Err()
}

// evicted emits event.WorkerEvicted for member of queue.
func (r *Registry) evicted(queue string, term Term, member string) {
	r.cfg.Events.Emit(event.Event{Kind: event.WorkerEvicted, At: r.cfg.Clock.Now(), Project: r.cfg.Project, Queue: queue,
		Token: term.Token(), Peer: member})
}

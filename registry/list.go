package registry

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/baton-run/baton/names"
)

// MaxListLimit is the largest page List returns.
const MaxListLimit = 1000

// Filter selects the workers List returns. Every zero field matches everything.
type Filter struct {
	// Queue keeps the workers of one task queue.
	Queue string
	// Status keeps the workers in one status.
	Status Status
	// Capability keeps the workers that declared it.
	Capability string
}

func (f Filter) matches(w Worker) bool {
	return (f.Status == "" || w.Status == f.Status) && (f.Capability == "" || w.HasCapability(f.Capability))
}

// List returns up to limit workers matching f, in (queue, server ID) order, starting after cursor
// ("" for the first page), and the cursor of the next page ("" after the last). A page is filled up
// to limit even when the filter skips entries.
//
// Pages are stable under concurrent registrations: the cursor is the position of the last worker
// returned in the index, so a worker that existed when paging started and still exists is returned
// exactly once, and a worker registered meanwhile is returned at most once (if it sorts after the
// cursor). Records that cannot be read are skipped, counted and logged; index entries whose record
// has expired are skipped and pruned.
func (r *Registry) List(ctx context.Context, f Filter, cursor string, limit int) ([]Worker, string, error) {
	if limit < 1 || limit > MaxListLimit {
		return nil, "", fmt.Errorf("%w: limit must be between 1 and %d, got %d", ErrInvalidArgument, MaxListLimit, limit)
	}
	if f.Queue != "" {
		if err := names.Check(f.Queue); err != nil {
			return nil, "", fmt.Errorf("%w: Filter.Queue %s %v", ErrInvalidArgument, names.Quote(f.Queue), err)
		}
	}
	if f.Status != "" && !f.Status.Valid() {
		return nil, "", fmt.Errorf("%w: Filter.Status must be ONLINE, DRAINING, OFFLINE or empty, got %s", ErrInvalidArgument, names.Quote(string(f.Status)))
	}
	start, stop := "-", "+"
	if f.Queue != "" {
		start, stop = "["+f.Queue+"\x00", "("+f.Queue+"\x01"
	}
	if cursor != "" {
		after, err := decodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		if q, _, _ := splitMember(after); f.Queue != "" && q != f.Queue {
			return nil, "", fmt.Errorf("%w: cursor belongs to queue %s, not to Filter.Queue %s", ErrInvalidArgument, names.Quote(q), names.Quote(f.Queue))
		}
		start = "(" + after
	}

	page := make([]Worker, 0, limit)
	for {
		// Read ahead of what the page still needs, since the filter may skip entries.
		chunk := min(max(2*(limit-len(page)), 32), MaxListLimit)
		members, err := r.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key: r.keys.index(), Start: start, Stop: stop, ByLex: true, Count: int64(chunk),
		}).Result()
		switch {
		case isWrongType(err):
			r.m.malformedSeen(ctx, "list", 1)
			return nil, "", fmt.Errorf("%w: key %s: the index is not a sorted set", ErrMalformed, r.keys.index())
		case err != nil:
			return nil, "", fmt.Errorf("registry: list: %w", err)
		}
		workers, err := r.load(ctx, members)
		if err != nil {
			return nil, "", err
		}
		for i, w := range workers {
			if w == nil || !f.matches(*w) {
				continue
			}
			page = append(page, *w)
			if len(page) == limit {
				if i == len(members)-1 && len(members) < chunk {
					return page, "", nil // the last entry there is
				}
				return page, encodeCursor(members[i]), nil
			}
		}
		if len(members) < chunk {
			return page, "", nil
		}
		start = "(" + members[len(members)-1]
	}
}

// load reads the records of index members in one pipeline. The result is aligned with members; an
// entry is nil when its record is gone (the entry is pruned) or cannot be read (logged and counted).
func (r *Registry) load(ctx context.Context, members []string) ([]*Worker, error) {
	type entry struct {
		queue, serverID, key string
		cmd                  *redis.MapStringStringCmd
	}
	entries := make([]entry, len(members))
	_, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range members {
			q, id, ok := splitMember(m)
			if !ok {
				continue
			}
			key := r.keys.worker(q, id)
			entries[i] = entry{queue: q, serverID: id, key: key, cmd: p.HGetAll(ctx, key)}
		}
		return nil
	})
	if err != nil && !isRedisError(err) {
		return nil, fmt.Errorf("registry: list: %w", err)
	}
	out := make([]*Worker, len(members))
	var goneKeys, goneMembers []string
	malformed := 0
	for i, e := range entries {
		if e.cmd == nil {
			malformed++
			r.log.Warn("skipped a malformed index entry", zap.String("key", r.keys.index()), zap.String("entry", names.Quote(members[i])))
			continue
		}
		fields, err := e.cmd.Result()
		switch {
		case isWrongType(err):
			malformed++
			r.log.Warn("skipped a malformed worker record", zap.String("key", e.key), zap.String("problem", "not a hash"))
			continue
		case err != nil:
			return nil, fmt.Errorf("registry: list: read %s: %w", e.key, err)
		case len(fields) == 0:
			goneKeys, goneMembers = append(goneKeys, e.key), append(goneMembers, members[i])
			continue
		}
		w, err := decodeWorker(e.key, e.queue, e.serverID, fields)
		if err != nil {
			malformed++
			r.log.Warn("skipped a malformed worker record", zap.String("key", e.key), zap.Error(err))
			continue
		}
		out[i] = &w
	}
	if malformed > 0 {
		r.m.malformedSeen(ctx, "list", malformed)
	}
	if len(goneKeys) > 0 {
		// Housekeeping only: a failure leaves the entries for the next List.
		keys := append([]string{r.keys.index()}, goneKeys...)
		args := make([]any, len(goneMembers))
		for i, m := range goneMembers {
			args[i] = m
		}
		if err := pruneIndexScript.Run(ctx, r.rdb, keys, args...).Err(); err != nil {
			r.log.Warn("could not prune index entries of expired records", zap.Int("entries", len(goneMembers)), zap.Error(err))
		}
	}
	return out, nil
}

// isRedisError reports whether err is an error reply of the server (such as WRONGTYPE for one
// command of a pipeline) rather than a failure to talk to it.
func isRedisError(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}

package reconciler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/heartbeat"
)

// staleEntry is an entry judged stale, with the Redis time of its node that judged it.
type staleEntry struct {
	heartbeat.Entry
	now time.Time
}

// node is one Redis server whose keys the cycle scans: the client itself, or one master of a cluster.
type node struct {
	addr string
	rdb  redis.Cmdable
}

// nodes returns the servers that together hold every key. SCAN and TIME answer for one server only,
// so on Redis Cluster that is every master; otherwise the client's one server.
func (r *Reconciler) nodes(ctx context.Context) ([]node, error) {
	cc, ok := r.rdb.(*redis.ClusterClient)
	if !ok {
		return []node{{rdb: r.rdb}}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	var (
		mu    sync.Mutex
		nodes []node
	)
	// ForEachMaster calls back concurrently; the masters are scanned one after another below, so that
	// one cycle's load on Redis stays that of a single-node scan.
	err := cc.ForEachMaster(cctx, func(_ context.Context, c *redis.Client) error {
		mu.Lock()
		nodes = append(nodes, node{addr: c.Options().Addr, rdb: c})
		mu.Unlock()
		return nil
	})
	switch {
	case err != nil:
		return nil, fmt.Errorf("reconciler: redis cluster masters: %w", err)
	case len(nodes) == 0:
		return nil, errors.New("reconciler: redis cluster has no masters")
	}
	slices.SortFunc(nodes, func(a, b node) int { return strings.Compare(a.addr, b.addr) })
	return nodes, nil
}

// classify scans the heartbeat keys of every node in batches of ScanCount, each read with one
// pipeline, and returns the project's stale entries.
func (r *Reconciler) classify(ctx context.Context, term Term, rep *Report) ([]staleEntry, error) {
	if err := r.check(term); err != nil {
		return nil, err
	}
	nodes, err := r.nodes(ctx)
	if err != nil {
		return nil, err
	}
	var stale []staleEntry
	for i, n := range nodes {
		if i > 0 {
			if err := r.check(term); err != nil {
				return nil, err
			}
		}
		s, err := r.classifyNode(ctx, term, n, rep)
		if err != nil {
			if n.addr != "" {
				err = fmt.Errorf("%w (cluster master %s)", err, n.addr)
			}
			return nil, err
		}
		stale = append(stale, s...)
	}
	return stale, nil
}

// classifyNode judges the entries of one node at that node's time: the heartbeat script stamped
// them with the clock of the server that holds them.
func (r *Reconciler) classifyNode(ctx context.Context, term Term, n node, rep *Report) ([]staleEntry, error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	now, err := n.rdb.Time(cctx).Result()
	cancel()
	rep.RedisCalls++
	if err != nil {
		return nil, fmt.Errorf("reconciler: redis TIME: %w", err)
	}
	if rep.RedisTime.IsZero() {
		rep.RedisTime = now
	}
	var stale []staleEntry
	for _, pattern := range r.patterns() {
		s, err := r.scanNode(ctx, term, n, pattern, now, rep)
		if err != nil {
			return nil, err
		}
		stale = append(stale, s...)
	}
	return stale, nil
}

// patterns are the SCAN patterns of the project's heartbeat keys: its own (heartbeat.Pattern) and,
// unless SkipLegacyHeartbeats, those of the layout before per-project keys (heartbeat.LegacyPattern).
func (r *Reconciler) patterns() []string {
	own := heartbeat.Pattern(r.cfg.Prefix, r.cfg.Project)
	if r.cfg.SkipLegacyHeartbeats {
		return []string{own}
	}
	return []string{own, heartbeat.LegacyPattern(r.cfg.Prefix, r.cfg.Project)}
}

// scanNode scans one node's keys that match pattern and returns the project's stale entries.
func (r *Reconciler) scanNode(ctx context.Context, term Term, n node, pattern string, now time.Time, rep *Report) ([]staleEntry, error) {
	var stale []staleEntry
	var cursor uint64
	for {
		cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
		keys, next, err := n.rdb.Scan(cctx, cursor, pattern, int64(r.cfg.ScanCount)).Result()
		rep.RedisCalls++
		if err != nil {
			cancel()
			return nil, fmt.Errorf("reconciler: redis SCAN: %w", err)
		}
		if len(keys) > 0 {
			batch, err := r.read(cctx, keys, now, rep)
			if err != nil {
				cancel()
				return nil, err
			}
			stale = append(stale, batch...)
		}
		cancel()
		if cursor = next; cursor == 0 {
			return stale, nil
		}
		if err := r.check(term); err != nil {
			return nil, err
		}
	}
}

// read fetches keys with one pipeline and classifies them. The pipeline goes through the
// application's client, so that on Redis Cluster a key moved since the SCAN is followed (MOVED,
// ASK); the keys of one SCAN page share a master, so it is still one round trip to one server.
func (r *Reconciler) read(ctx context.Context, keys []string, now time.Time, rep *Report) ([]staleEntry, error) {
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.HGetAll(ctx, k)
	}
	_, _ = pipe.Exec(ctx) // errors are per command, below
	rep.RedisCalls++
	var stale []staleEntry
	for i, cmd := range cmds {
		rep.Scanned++
		fields, err := cmd.Result()
		switch {
		case err != nil && isWrongType(err):
			r.malformed(ctx, rep, keys[i], fmt.Errorf("%w: key %s is not a hash", heartbeat.ErrMalformed, keys[i]))
			continue
		case err != nil:
			return nil, fmt.Errorf("reconciler: redis HGETALL: %w", err)
		case len(fields) == 0:
			continue // deleted since the SCAN
		}
		e, err := heartbeat.Decode(r.cfg.Prefix, keys[i], fields)
		if err != nil {
			r.malformed(ctx, rep, keys[i], err)
			continue
		}
		if e.Project != r.cfg.Project || rep.judged[e.RunID] {
			continue // another project's, or a key a slot migration showed on two masters
		}
		rep.judged[e.RunID] = true
		if e.Age(now) > r.cfg.StaleAfter {
			rep.Stale++
			stale = append(stale, staleEntry{Entry: e, now: now})
		} else {
			rep.Active++
			rep.live = append(rep.live, e)
		}
	}
	return stale, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/benchreport"
	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/redistest"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

const benchProject = "bench"

// benchReconcile measures reconcile cycles over o.heartbeats entries on a real redis-server, 1 % of
// them stale, against a real etcd (leader lookups, the reconciler's fencing) and a real Temporal
// server (each stale run's terminate is a real call; the runs are already gone, so it answers
// NotFound, which counts as done). The baseline is a naive loop over the same data in the same run:
// KEYS, then one HGETALL per key, then terminate and DEL per stale entry. The termination rate limit is
// lifted: the figure is the cycle's own cost (with the default 20/s, a 1,000-run backlog drains in 50 s).
func benchReconcile(ctx context.Context, cluster *etcdtest.Cluster, o options) ([]benchreport.Figure, error) {
	s, err := startServers(ctx, cluster, need{redis: true, temporal: true, etcd: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	tc, rdb := s.tc, s.rdb
	queues, err := s.elector(s.etcd, election.Config{})
	if err != nil {
		return nil, err
	}
	term, err := s.reconcilerTerm(s.etcd, benchProject)
	if err != nil {
		return nil, err
	}
	stale := o.heartbeats / 100
	fmt.Printf("batonbench: reconcile: writing %d heartbeat entries (%d stale)\n", o.heartbeats, stale)
	ours, oursCalls, err := reconcileCycles(ctx, rdb, tc, queues, term, o)
	if err != nil {
		return nil, err
	}
	var naive, naiveCalls []float64
	for range o.naiveRounds {
		if err := writeEntries(ctx, rdb, o.heartbeats, true); err != nil {
			return nil, err
		}
		d, calls, deleted, err := naiveCycle(ctx, rdb, tc)
		if err != nil {
			return nil, err
		}
		if deleted != stale {
			return nil, fmt.Errorf("naive cycle deleted %d, want %d", deleted, stale)
		}
		naive = append(naive, benchreport.Ms(d))
		naiveCalls = append(naiveCalls, float64(calls))
	}
	name := fmt.Sprintf("reconcile cycle, %dk heartbeats, 1%% stale", o.heartbeats/1000)
	figures := []benchreport.Figure{
		benchreport.NewFigure(name, "ms", ours, "naive KEYS + HGETALL loop", naive, "p95 <= 2000 ms",
			func(f benchreport.Figure) bool { return f.P95 <= 2000 }),
		benchreport.NewFigure(name+": Redis round trips", "calls", oursCalls, "naive KEYS + HGETALL loop", naiveCalls,
			">= 10x fewer than the naive loop", func(f benchreport.Figure) bool { return f.P95*10 <= f.BaselineP50 }),
	}

	// The same entries on a 3-master Redis Cluster, against the single server's cycles above.
	rc, err := redistest.StartClusterServers(redistest.ClusterOptions{Masters: 3})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	cc := rc.NewClient()
	defer cc.Close()
	fmt.Printf("batonbench: reconcile: writing %d heartbeat entries (%d stale) on a 3-master cluster\n", o.heartbeats, stale)
	onCluster, clusterCalls, err := reconcileCycles(ctx, cc, tc, queues, term, o)
	if err != nil {
		return nil, fmt.Errorf("on Redis Cluster: %w", err)
	}
	return append(figures,
		benchreport.NewFigure(name+", Redis Cluster (3 masters)", "ms", onCluster, "one redis-server", ours, "p95 <= 2000 ms",
			func(f benchreport.Figure) bool { return f.P95 <= 2000 }),
		benchreport.NewFigure(name+", Redis Cluster (3 masters): Redis round trips", "calls", clusterCalls, "one redis-server", oursCalls,
			"within 10 % of one server's", func(f benchreport.Figure) bool { return f.P95 <= 1.1*f.BaselineP50 }),
	), nil
}

// reconcileCycles writes o.heartbeats entries to rdb, then measures o.reconcileRounds cycles of a
// reconciler on rdb, each after the previous cycle's deleted stale entries are written again. It
// returns each cycle's duration (ms) and Redis round trips.
func reconcileCycles(ctx context.Context, rdb redis.UniversalClient, tc client.Client, queues *election.Elector, term reconciler.Term,
	o options) ([]float64, []float64, error) {
	rec, err := reconciler.New(reconciler.Config{Project: benchProject, ServerID: "bench-reconciler",
		TerminateRate: 1e6, TerminateBurst: 1000, Workers: 8}, rdb, tc, queues)
	if err != nil {
		return nil, nil, err
	}
	stale := o.heartbeats / 100
	if err := writeEntries(ctx, rdb, o.heartbeats, false); err != nil {
		return nil, nil, err
	}
	var ms, calls []float64
	for round := range o.reconcileRounds {
		if err := writeEntries(ctx, rdb, o.heartbeats, true); err != nil {
			return nil, nil, err
		}
		rep, err := rec.Cycle(ctx, term)
		if err != nil {
			return nil, nil, fmt.Errorf("reconcile cycle %d: %w", round, err)
		}
		if rep.Scanned != o.heartbeats || rep.Stale != stale || rep.Deleted != stale || rep.CleanupErrors != 0 {
			return nil, nil, fmt.Errorf("reconcile cycle %d: scanned %d, stale %d, deleted %d, errors %d; want %d, %d, %d, 0",
				round, rep.Scanned, rep.Stale, rep.Deleted, rep.CleanupErrors, o.heartbeats, stale, stale)
		}
		ms = append(ms, benchreport.Ms(rep.Duration))
		calls = append(calls, float64(rep.RedisCalls))
	}
	return ms, calls, nil
}

// writeEntries writes n dispatcher heartbeats of benchProject with pipelines; every 100th is an hour
// old. With onlyStale it rewrites just those (a cycle deleted them).
func writeEntries(ctx context.Context, rdb redis.UniversalClient, n int, onlyStale bool) error {
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return err
	}
	pipe := rdb.Pipeline()
	for i := range n {
		isStale := i%100 == 0
		if onlyStale && !isStale {
			continue
		}
		queue := fmt.Sprintf("q%06d", i)
		id, err := takeover.WorkflowID(benchProject, queue)
		if err != nil {
			return err
		}
		// The fresh ones are dated an hour ahead: they stay fresh however long a loaded machine
		// takes over the cycles.
		at := now.Add(time.Hour)
		if isStale {
			at = now.Add(-time.Hour)
		}
		pipe.HSet(ctx, heartbeat.DefaultPrefix+id, heartbeat.FieldWorkflowID, id,
			heartbeat.FieldRunID, fmt.Sprintf("00000000-0000-4000-8000-%012d", i), heartbeat.FieldServerID, "bench-owner",
			heartbeat.FieldToken, strconv.Itoa(i+1), heartbeat.FieldProject, benchProject, heartbeat.FieldQueue, queue,
			heartbeat.FieldUpdatedMs, strconv.FormatInt(at.UnixMilli(), 10), heartbeat.FieldVersion, "1")
		if pipe.Len() >= 1000 {
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
		}
	}
	_, err = pipe.Exec(ctx)
	return err
}

// naiveCycle is what a reconciler written without care does: KEYS, one read per key, and for each
// stale entry a terminate and a DEL.
func naiveCycle(ctx context.Context, rdb *redis.Client, tc client.Client) (time.Duration, int, int, error) {
	start := time.Now()
	calls := 0
	now, err := rdb.Time(ctx).Result()
	calls++
	if err != nil {
		return 0, 0, 0, err
	}
	keys, err := rdb.Keys(ctx, heartbeat.DefaultPrefix+"*").Result()
	calls++
	if err != nil {
		return 0, 0, 0, err
	}
	deleted := 0
	for _, k := range keys {
		fields, err := rdb.HGetAll(ctx, k).Result()
		calls++
		if err != nil {
			return 0, 0, 0, err
		}
		e, err := heartbeat.Decode(heartbeat.DefaultPrefix, k, fields)
		if err != nil || e.Project != benchProject || e.Age(now) <= 30*time.Second {
			continue
		}
		err = tc.TerminateWorkflow(ctx, e.WorkflowID, e.RunID, "naive reconcile")
		var notFound *serviceerror.NotFound
		if err != nil && !errors.As(err, &notFound) {
			return 0, 0, 0, err
		}
		if err := rdb.Del(ctx, k).Err(); err != nil {
			return 0, 0, 0, err
		}
		calls++
		deleted++
	}
	return time.Since(start), calls, deleted, nil
}

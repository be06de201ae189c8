// Package benchregistry measures the worker registry's heartbeat path on a real Redis: throughput,
// latency percentiles, and the Redis commands each heartbeat costs, which must not grow with the
// number of registered workers (compare Run with 1,000 and with 10,000 workers).
package benchregistry

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/tools/benchreport"
	"github.com/baton-run/baton/registry"
)

// concurrency is how many callers register and heartbeat at once.
const concurrency = 32

// Queue is the task queue every benchmark worker registers on: one heartbeat set holds them all,
// the worst case for the sorted-set update of each heartbeat.
const Queue = "bench"

// Result is what Run measured. Every duration is wall-clock time on the client.
type Result struct {
	Workers int
	// Heartbeats measured: Workers × Rounds.
	Heartbeats int
	// RegisterElapsed is the time to register every worker.
	RegisterElapsed time.Duration
	// PerSecond is the heartbeats per second of wall-clock time.
	PerSecond float64
	// Latency percentiles of single heartbeats, sent by concurrent callers.
	P50, P95, P99 time.Duration
	// ClientCommandsPerHeartbeat is the number of commands the client sent per heartbeat (round
	// trips), counted by a go-redis hook: 1, the script call.
	ClientCommandsPerHeartbeat float64
	// ServerCommandsPerHeartbeat is Redis's total_commands_processed per heartbeat, which includes
	// the commands run inside the script. Exact only when nothing else uses the server meanwhile.
	ServerCommandsPerHeartbeat float64
}

// Run registers workers workers in a fresh key prefix, heartbeats each of them rounds times from
// concurrent callers, measures, and deletes the prefix's keys. It talks to Redis through a client
// of its own, made with rdb's options (so that it can count the commands it sends); rdb itself is
// left untouched.
func Run(ctx context.Context, rdb *redis.Client, workers, rounds int) (Result, error) {
	if rdb == nil || workers <= 0 || rounds <= 0 {
		return Result{}, fmt.Errorf("benchregistry: Run needs a Redis client (got %v), workers > 0 (got %d) and rounds > 0 (got %d)",
			rdb != nil, workers, rounds)
	}
	res := Result{Workers: workers, Heartbeats: workers * rounds}
	opts := *rdb.Options()
	cli := redis.NewClient(&opts)
	defer cli.Close()
	counter := &countingHook{}
	cli.AddHook(counter)

	prefix := "baton:bench:" + rand.Text()[:12] + ":"
	reg, err := registry.New(cli, registry.Config{Project: "bench", Prefix: prefix})
	if err != nil {
		return Result{}, err
	}
	defer func() { _ = deletePrefix(context.WithoutCancel(ctx), cli, prefix) }()

	start := time.Now()
	if err := harness.Parallel(ctx, workers, concurrency, func(ctx context.Context, i int) error {
		_, err := reg.Register(ctx, registry.Registration{ServerID: serverID(i), Queue: Queue, Hostname: fmt.Sprintf("bench-host-%03d", i%100),
			PID: 1000 + i, Version: "bench", Capabilities: []string{"BenchWorkflow"}, MaxConcurrency: 8})
		return err
	}); err != nil {
		return Result{}, fmt.Errorf("benchregistry: register: %w", err)
	}
	res.RegisterElapsed = time.Since(start)

	// Warm up: the first heartbeat loads the script (NOSCRIPT, then EVAL); measure steady state.
	if _, err := reg.Heartbeat(ctx, Queue, serverID(0), registry.Beat{}); err != nil {
		return Result{}, fmt.Errorf("benchregistry: heartbeat: %w", err)
	}
	before, err := totalCommands(ctx, cli)
	if err != nil {
		return Result{}, err
	}
	counter.on.Store(true)
	latencies := make([]time.Duration, res.Heartbeats)
	start = time.Now()
	for r := range rounds {
		if err := harness.Parallel(ctx, workers, concurrency, func(ctx context.Context, i int) error {
			t0 := time.Now()
			_, err := reg.Heartbeat(ctx, Queue, serverID(i), registry.Beat{Active: i % 8, CompletedDelta: 1})
			latencies[r*workers+i] = time.Since(t0)
			return err
		}); err != nil {
			return Result{}, fmt.Errorf("benchregistry: heartbeat: %w", err)
		}
	}
	res.PerSecond = float64(res.Heartbeats) / time.Since(start).Seconds()
	counter.on.Store(false)
	after, err := totalCommands(ctx, cli)
	if err != nil {
		return Result{}, err
	}
	// The INFO that read "before" is counted in "after".
	res.ServerCommandsPerHeartbeat = float64(after-before-1) / float64(res.Heartbeats)
	res.ClientCommandsPerHeartbeat = float64(counter.n.Load()) / float64(res.Heartbeats)
	res.P50, res.P95, res.P99 = benchreport.Percentile(latencies, 50), benchreport.Percentile(latencies, 95), benchreport.Percentile(latencies, 99)
	return res, nil
}

func serverID(i int) string { return fmt.Sprintf("bench-worker-%06d", i) }

// totalCommands reads total_commands_processed from INFO stats.
func totalCommands(ctx context.Context, cli *redis.Client) (int64, error) {
	info, err := cli.Info(ctx, "stats").Result()
	if err != nil {
		return 0, fmt.Errorf("benchregistry: INFO stats: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "total_commands_processed:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, errors.New("benchregistry: INFO stats has no total_commands_processed")
}

// deletePrefix removes every key of the benchmark.
func deletePrefix(ctx context.Context, cli *redis.Client, prefix string) error {
	pipe := cli.Pipeline()
	iter := cli.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		pipe.Unlink(ctx, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	_, err := pipe.Exec(ctx)
	return err
}

// countingHook counts the commands sent while on is set (a pipeline counts each of its commands).
type countingHook struct {
	on atomic.Bool
	n  atomic.Int64
}

func (h *countingHook) count(n int) {
	if h.on.Load() {
		h.n.Add(int64(n))
	}
}

func (h *countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.count(1); return next(ctx, cmd) }
}

func (h *countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.count(len(cmds)); return next(ctx, cmds) }
}

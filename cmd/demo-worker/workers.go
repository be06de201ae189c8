package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/cmd/demo-worker/contract"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// workerParams are what the Temporal workers need. They take the Node only to be built after it: see
// appOptions for why the workers' hook must be registered after the Node's.
type workerParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Options   runOptions
	Temporal  client.Client
	Etcd      *clientv3.Client
	Logger    *zap.Logger
	Node      *baton.Node
	Load      *dispatchLoad
	Meters    metric.MeterProvider
}

// startTemporalWorkers runs the reference dispatcher on a Temporal worker per task queue: each queue's
// default (takeover.DefaultTaskQueue), or BATON_DISPATCHER_TASK_QUEUE for all of them when it is set.
func startTemporalWorkers(p workerParams) error {
	cfg := p.Options.Cfg
	queues := make([]string, len(cfg.Queues))
	for i, q := range cfg.Queues {
		queues[i] = takeover.DefaultTaskQueue(cfg.Project, q)
	}
	if cfg.Takeover.TaskQueue != "" {
		queues = []string{cfg.Takeover.TaskQueue}
	}
	dl, err := ledger.New(p.Etcd, ledger.Config{})
	if err != nil {
		return err
	}
	if err := p.Node.AddReadinessCheck("dispatch-ledger", dl.Check); err != nil {
		return err
	}
	log := p.Logger.Named("dispatch")
	acts := &dispatcher.Activities{Ledger: dl, Handler: p.Load.count(logDispatch(log)), History: p.Temporal,
		Events: cfg.Events, MeterProvider: p.Meters}
	drain := p.Options.drainTimeout()
	workers := make([]worker.Worker, len(queues))
	for i, q := range queues {
		// dispatcher.WorkerOptions: a crash of this process stalls the runs whose tasks it holds, led
		// here or not, for about a second.
		workers[i] = worker.New(p.Temporal, q, dispatcher.WorkerOptions(worker.Options{
			Identity: cfg.ServerID + "@" + q,
			// Stop stops polling at once, then waits this long for the tasks the worker holds.
			WorkerStopTimeout: drain,
		}))
		dispatcher.Register(workers[i], acts)
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			for i, w := range workers {
				if err := w.Start(); err != nil {
					stopAll(workers[:i])
					return fmt.Errorf("temporal worker for task queue %s: %w", queues[i], err)
				}
			}
			p.Logger.Info("temporal workers started", zap.Strings("task_queues", queues))
			return nil
		},
		OnStop: func(ctx context.Context) error {
			// The SDK's Stop is bounded by WorkerStopTimeout plus its goodbye to the server. The Node
			// stops after this hook and needs its own budget, so the wait ends at the drain and
			// the slack even when Stop does not: the process is exiting, and the handover matters
			// more than a worker that cannot say goodbye.
			ctx, cancel := context.WithTimeout(ctx, drain+contract.StopSlack)
			defer cancel()
			// The runs this process leads finish their dispatches first, while its workers still
			// serve them (the Node's step-down then finds them quiesced). The workers stop before the
			// Node hands the queues over, not after: a run whose quiesce timed out still has
			// dispatches in flight here, and they finish (within the drain) before the run ends and
			// its successor carries the rest over, so even then a planned stop runs no handler twice.
			// Handing over first (issue #40) started half the successors sooner but not the slowest
			// ones, and under load let quiesces run into their timeout. What the workers' stop costs
			// here is small since carry-over pages give up when it begins
			// (dispatcher.Activities.Backlog): 0.1-0.2 s for 100 queues, down from 4.7 s.
			quiesced := time.Now()
			p.Node.Quiesce(ctx)
			began := time.Now()
			p.Logger.Debug("dispatcher runs quiesced", zap.Duration("took", began.Sub(quiesced)))
			done := make(chan struct{})
			go func() { stopAll(workers); close(done) }()
			select {
			case <-done:
				p.Logger.Info("temporal workers stopped", zap.Strings("task_queues", queues), zap.Duration("took", time.Since(began)))
				return nil
			case <-ctx.Done():
				return fmt.Errorf("temporal workers still stopping after %v: %w", time.Since(began).Round(time.Millisecond), ctx.Err())
			}
		},
	})
	return nil
}

// stopAll stops the workers in parallel and waits for them.
func stopAll(workers []worker.Worker) {
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(w.Stop)
	}
	wg.Wait()
}

// logDispatch is the demo's dispatch handler: it logs the dispatch. It is idempotent by key.
func logDispatch(log *zap.Logger) dispatcher.Handler {
	return func(ctx context.Context, key string, req dispatcher.Request, owner takeover.Owner) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		log.Info("dispatched",
			zap.String("key", key),
			zap.String("type", req.Type),
			zap.String("task_id", req.TaskID),
			zap.String("project", owner.Project),
			zap.String("queue", owner.Queue),
			zap.String("owner", owner.ServerID),
			zap.Int64("token", owner.Token))
		return nil
	}
}

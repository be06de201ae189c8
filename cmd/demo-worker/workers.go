package main

import (
	"context"
	"fmt"
	"sync"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// workerParams are what the Temporal workers need. They ask for neither the Node nor anything that
// needs it: see appOptions for why the workers' hook must be registered before the Node's.
type workerParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Options   runOptions
	Temporal  client.Client
	Etcd      *clientv3.Client
	Logger    *zap.Logger
}

// startTemporalWorkers runs the reference dispatcher on a Temporal worker per task queue: the queue
// each dispatcher leads, or BATON_DISPATCHER_TASK_QUEUE for all of them when it is set.
func startTemporalWorkers(p workerParams) error {
	cfg := p.Options.cfg
	queues := cfg.Queues
	if cfg.Takeover.TaskQueue != "" {
		queues = []string{cfg.Takeover.TaskQueue}
	}
	ledger, err := dispatcher.NewEtcdLedger(p.Etcd, "", 0)
	if err != nil {
		return err
	}
	log := p.Logger.Named("dispatch")
	acts := &dispatcher.Activities{Ledger: ledger, Handler: logDispatch(log)}
	workers := make([]worker.Worker, len(queues))
	for i, q := range queues {
		workers[i] = worker.New(p.Temporal, q, worker.Options{
			Identity: cfg.ServerID + "@" + q,
			// Running dispatches get a third of the stop budget to finish.
			WorkerStopTimeout: p.Options.shutdownTimeout / 3,
		})
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
			done := make(chan struct{})
			go func() { stopAll(workers); close(done) }()
			select {
			case <-done:
				p.Logger.Info("temporal workers stopped", zap.Strings("task_queues", queues))
				return nil
			case <-ctx.Done():
				return fmt.Errorf("temporal workers still stopping: %w", ctx.Err())
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

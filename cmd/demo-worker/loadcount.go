package main

import (
	"context"
	"sync/atomic"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// dispatchLoad counts the dispatches this worker's handler runs, per queue, for baton.Config.Load:
// the registry, `demo-worker status` and the Node's /status show them.
type dispatchLoad struct {
	queues map[string]*queueLoad
}

type queueLoad struct {
	active            atomic.Int64
	completed, failed atomic.Int64
}

func newDispatchLoad(queues []string) *dispatchLoad {
	l := &dispatchLoad{queues: make(map[string]*queueLoad, len(queues))}
	for _, q := range queues {
		l.queues[q] = &queueLoad{}
	}
	return l
}

// report is baton.Config.Load.
func (l *dispatchLoad) report(queue string) baton.WorkerLoad {
	q, ok := l.queues[queue]
	if !ok {
		return baton.WorkerLoad{}
	}
	return baton.WorkerLoad{Active: int(q.active.Load()), Completed: q.completed.Load(), Failed: q.failed.Load()}
}

// count wraps h so that each call is counted under its owner's queue.
func (l *dispatchLoad) count(h dispatcher.Handler) dispatcher.Handler {
	return func(ctx context.Context, key string, req dispatcher.Request, owner takeover.Owner) error {
		q, ok := l.queues[owner.Queue]
		if !ok {
			return h(ctx, key, req, owner)
		}
		q.active.Add(1)
		defer q.active.Add(-1)
		err := h(ctx, key, req, owner)
		if err != nil {
			q.failed.Add(1)
		} else {
			q.completed.Add(1)
		}
		return err
	}
}

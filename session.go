package baton

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
)

// sessionPoll is how often Start looks for the first etcd session: a local read, cheap enough to be
// frequent, and short against any start timeout.
const sessionPoll = 10 * time.Millisecond

// awaitSession waits for this process's first etcd session. If ctx ends first, it stops the Node
// (the caller's lifecycle does not stop what failed to start) and returns why.
func (n *Node) awaitSession(ctx context.Context) error {
	for {
		if _, ok := n.queues.SessionValidUntil(); ok {
			return nil
		}
		if !clock.Sleep(ctx, n.cfg.Clock, sessionPoll) {
			break
		}
	}
	cause := context.Cause(ctx)
	// The stop gets its own bound: ctx has ended, and a stop that cannot reach etcd must not hang.
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), n.queues.Config().TTL)
	defer cancel()
	if err := n.Stop(stopCtx); err != nil {
		n.log.Warn("stop after a start that found no etcd session", zap.Error(err))
	}
	return fmt.Errorf("baton: start: no etcd session yet (Config.WaitForSession): %w", cause)
}

package election

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
)

// ErrNoLeader is returned by Leader when no candidate holds (project, queue).
var ErrNoLeader = errors.New("election: no leader")

// Leader is who etcd shows as leader of a (project, queue). It is advisory (etcd#7815): by the time it
// is read the leader may have changed. Use it for status and metrics, never to decide to act: a leader
// fences with its Term (Guard, Confirm), and a dispatcher run with its Owner (see package takeover).
type Leader struct {
	ID    string // the leader's campaign value, normally its server ID
	Token int64  // its fencing token
	Key   string // its candidate key
}

// Leader returns the current leader of (project, queue), or ErrNoLeader.
func (e *Elector) Leader(ctx context.Context, project, queue string) (Leader, error) {
	if err := ValidateName("project", project); err != nil {
		return Leader{}, err
	}
	if err := ValidateName("queue", queue); err != nil {
		return Leader{}, err
	}
	l, _, err := e.leader(ctx, e.ElectionKey(project, queue))
	return l, err
}

func (e *Elector) leader(ctx context.Context, prefix string) (Leader, int64, error) {
	resp, err := e.client.Get(ctx, prefix+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return Leader{}, 0, fmt.Errorf("election: leader of %s: %w", prefix, err)
	}
	if len(resp.Kvs) == 0 {
		return Leader{}, resp.Header.Revision, ErrNoLeader
	}
	kv := resp.Kvs[0]
	return Leader{ID: string(kv.Value), Token: kv.CreateRevision, Key: string(kv.Key)}, resp.Header.Revision, nil
}

// Observe reports every change of leader of (project, queue), starting with the current one; a
// zero Leader means nobody leads. The channel is closed when ctx ends or the Elector is closed.
func (e *Elector) Observe(ctx context.Context, project, queue string) (<-chan Leader, error) {
	if err := ValidateName("project", project); err != nil {
		return nil, err
	}
	if err := ValidateName("queue", queue); err != nil {
		return nil, err
	}
	octx, stop, err := e.bind(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader)
	prefix := e.ElectionKey(project, queue)
	e.wg.Go(func() {
		defer close(out)
		defer stop()
		e.observe(octx, prefix, out)
	})
	return out, nil
}

func (e *Elector) observe(ctx context.Context, prefix string, out chan<- Leader) {
	var last Leader
	sent := false
	backoff := e.cfg.RetryMin
	for ctx.Err() == nil {
		cur, rev, err := e.leader(ctx, prefix)
		if err != nil && !errors.Is(err, ErrNoLeader) {
			if !e.sleep(ctx, clock.Jitter(e.cfg.Clock, backoff)) {
				return
			}
			backoff = min(2*backoff, e.cfg.RetryMax)
			continue
		}
		backoff = e.cfg.RetryMin
		if !sent || cur != last {
			select {
			case out <- cur:
			case <-ctx.Done():
				return
			}
			last, sent = cur, true
		}
		// Wait for any change under the prefix, then read the leader again.
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		for resp := range e.client.Watch(wctx, prefix+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
			if resp.Err() != nil || len(resp.Events) > 0 {
				break
			}
		}
		cancel()
	}
}

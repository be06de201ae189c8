package etcdmodel

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/metadata"
)

// NewClient returns a real *clientv3.Client whose KV, Watcher and Lease reach the model through the
// transport under the given client name. ctx bounds the client (clientv3.NewCtxClient); Close it.
func (m *Model) NewClient(ctx context.Context, name string) *clientv3.Client {
	c := clientv3.NewCtxClient(ctx, clientv3.WithZapLogger(zap.NewNop()))
	c.KV = clientv3.NewKVFromKVClient(&kvClient{m: m, name: name}, c)
	c.Watcher = &orderedWatcher{Watcher: clientv3.NewWatchFromWatchClient(&watchClient{m: m, name: name}, c), m: m, name: name}
	c.Lease = clientv3.NewLeaseFromLeaseClient(&leaseClient{m: m, name: name}, c, time.Second)
	return c
}

// watchLabelKey is the outgoing metadata naming a watch's stream (orderedWatcher).
const watchLabelKey = "sim-watch"

// WatchLabel names the watch stream a stream message travels on, from the stream's context (empty
// for other messages): every stream's watch has ID 0 on its stream, so two streams' messages can be
// byte for byte the same, and a transport that orders messages by content tells them apart by it.
func WatchLabel(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get(watchLabelKey); len(v) > 0 {
		return v[0]
	}
	return ""
}

// orderedWatcher passes each Watch call through the transport (MethodOpenWatch) before clientv3 sees
// it, so that the transport, not the Go runtime, orders the watches of a client's goroutines.
type orderedWatcher struct {
	clientv3.Watcher
	m    *Model
	name string
}

func (w *orderedWatcher) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	var ch clientv3.WatchChan
	// The op's fields (key, range end, revision, filters, notifications) name the watch; it has no
	// pointer set by a Watch's options but the sort, which a watch never takes.
	name := fmt.Sprintf("%+v", clientv3.OpGet(key, opts...))
	// Each watch on a gRPC stream of its own (clientv3 shares a stream among the watches whose
	// contexts carry the same metadata): when a stream ends, clientv3 resumes its watches in the
	// order of a Go map, which no seed decides. One watch a stream resumes in one order.
	sctx := metadata.AppendToOutgoingContext(ctx, watchLabelKey, name)
	err := w.m.opts.Transport.Call(ctx, w.name, MethodOpenWatch, name, func() error {
		ch = w.Watcher.Watch(sctx, key, opts...)
		return nil
	})
	if err != nil { // the caller's context ended first: what clientv3 gives a watch on a done context
		closed := make(chan clientv3.WatchResponse)
		close(closed)
		return closed
	}
	return ch
}

// SetLeader starts (false) or ends (true) a window without a raft leader: requests wait, streams that
// require a leader end with rpctypes.ErrGRPCNoLeader, leases do not expire; when a leader returns,
// every lease gets its full TTL again (etcd's lessor Promote).
func (m *Model) SetLeader(has bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if has == !m.noLeader {
		return
	}
	if !has {
		m.noLeader = true
		for ws := range m.watches {
			if ws.requireLeader {
				ws.closeLocked(errNoLeader)
			}
		}
		m.scheduleExpiryLocked()
		return
	}
	m.noLeader = false
	m.releaseNextLocked()
	m.promoteLocked()
}

// LeaderChange is a raft-leader change without a visible leaderless window: a new term, and every
// lease gets its full TTL again.
func (m *Model) LeaderChange() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.promoteLocked()
}

func (m *Model) promoteLocked() {
	m.raftTerm++
	now := m.clk.Now()
	for _, l := range m.leases {
		l.expiry = now.Add(time.Duration(l.ttl) * time.Second)
	}
	m.scheduleExpiryLocked()
}

// Revoke is an operator's lease revoke, outside any client (no transport).
func (m *Model) Revoke(id int64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.leases[id]; !ok {
		return false
	}
	m.revokeLocked(id)
	return true
}

// Compact compacts at the current revision minus keep (an operator's or the auto-compactor's act).
func (m *Model) Compact(keep int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if rev := m.rev - keep; rev > m.compactRev {
		_ = m.compactLocked(rev)
	}
}

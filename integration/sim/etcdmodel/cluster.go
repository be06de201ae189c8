package etcdmodel

import (
	"context"
	"strconv"
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
	c.Watcher = streamPerWatch{clientv3.NewWatchFromWatchClient(&watchClient{m: m, name: name}, c)}
	c.Lease = clientv3.NewLeaseFromLeaseClient(&leaseClient{m: m, name: name}, c, time.Second)
	return c
}

// watchLabelKey is the outgoing metadata naming a watch's stream (streamPerWatch).
const watchLabelKey = "sim-watch"

// watchLabelCtx keys a watch stream's name among its context's values (set once per stream).
type watchLabelCtx struct{}

// WatchLabel names the watch stream a stream message travels on, from the stream's context (empty
// for other messages): every stream's watch has ID 0 on its stream, so two streams' messages can be
// byte for byte the same, and a transport that orders messages by content tells them apart by it.
func WatchLabel(ctx context.Context) string {
	label, _ := ctx.Value(watchLabelCtx{}).(string)
	return label
}

// streamPerWatch puts each Watch call on a gRPC stream of its own: clientv3 shares a stream among
// the watches whose contexts carry the same metadata, sends their creates in the order their
// goroutines reached it and, when the stream ends, resumes them in the order of a Go map, which no
// seed decides. A watch alone on its stream is resumed in one order, and its messages are named by
// the watch (WatchLabel), so the network orders them by content whichever goroutine sent first.
type streamPerWatch struct {
	clientv3.Watcher
}

func (w streamPerWatch) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	// Key, range end and start revision name the watch (two watches of one client that agree on all
	// three and differ in their filters would share a name, and only their order would be the runtime's).
	op := clientv3.OpGet(key, opts...)
	name := key + "\x00" + string(op.RangeBytes()) + "\x00" + strconv.FormatInt(op.Rev(), 10)
	return w.Watcher.Watch(metadata.AppendToOutgoingContext(ctx, watchLabelKey, name), key, opts...)
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

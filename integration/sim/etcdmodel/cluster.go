package etcdmodel

import (
	"time"

	"context"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// NewClient returns a real *clientv3.Client whose KV, Watcher and Lease reach the model through the
// transport under the given client name. ctx bounds the client (clientv3.NewCtxClient); Close it.
func (m *Model) NewClient(ctx context.Context, name string) *clientv3.Client {
	c := clientv3.NewCtxClient(ctx, clientv3.WithZapLogger(zap.NewNop()))
	c.KV = clientv3.NewKVFromKVClient(&kvClient{m: m, name: name}, c)
	c.Watcher = clientv3.NewWatchFromWatchClient(&watchClient{m: m, name: name}, c)
	c.Lease = clientv3.NewLeaseFromLeaseClient(&leaseClient{m: m, name: name}, c, time.Second)
	return c
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
		m.leaderc = make(chan struct{})
		for ws := range m.watches {
			if ws.requireLeader {
				ws.closeLocked(errNoLeader)
			}
		}
		m.scheduleExpiryLocked()
		return
	}
	m.noLeader = false
	close(m.leaderc)
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

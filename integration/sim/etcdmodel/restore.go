package etcdmodel

import (
	"errors"
	"maps"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// errRestarted ends every watch stream at a restore: the member restarted on the restored data dir,
// so clients see their connection break (Unavailable) and clientv3 resumes each watch from the
// revision after the last one it received.
var errRestarted = status.Error(codes.Unavailable, "etcdmodel: server restarted (restore)")

// ErrRestoreFlags is Restore's answer to flags etcdutl refuses: --bump-revision and --mark-compacted
// go together (etcdutl snapshot restore: "--mark-compacted required if --revision-bump > 0").
var ErrRestoreFlags = errors.New("etcdmodel: --mark-compacted required if --bump-revision > 0, disallowed otherwise")

// Snapshot is the model's state at one revision as `etcdctl snapshot save` keeps it (the backend
// database): the key space, every revision since the last compaction, and the leases with their
// granted TTLs (not their expiries: the database keeps no deadline, only the TTL, and a remaining
// TTL only with lease checkpointing, which is off by default and not modelled).
type Snapshot struct {
	rev, compactRev int64
	kvs             map[string]*mvccpb.KeyValue
	history         []revision
	leases          map[int64]int64 // id -> granted TTL, seconds
}

// Revision is the revision the snapshot was taken at.
func (s Snapshot) Revision() int64 { return s.rev }

// Snapshot takes a snapshot of the current state (the model's key values and events are never
// changed once made, so sharing them is safe).
func (m *Model) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := Snapshot{rev: m.rev, compactRev: m.compactRev, kvs: maps.Clone(m.kvs), history: slices.Clone(m.history),
		leases: make(map[int64]int64, len(m.leases))}
	for id, l := range m.leases {
		s.leases[id] = l.ttl
	}
	return s
}

// RestoreOptions are the flags of `etcdutl snapshot restore` that change what clients see.
type RestoreOptions struct {
	// BumpRevision is --bump-revision: the restored revision is the snapshot's plus this, so that
	// revisions never go back. Requires MarkCompacted.
	BumpRevision int64
	// MarkCompacted is --mark-compacted: the bumped revision is scheduled for compaction, which the
	// restored member carries out at start, so that every watch from before gets ErrCompacted
	// instead of silently missing the revisions lost. Requires BumpRevision > 0.
	MarkCompacted bool
	// ElectionTimeout is how much longer than its TTL every lease lives after the restored member
	// becomes leader (etcd's lessor Promote(ElectionTimeout)); default 1s, etcd's default.
	ElectionTimeout time.Duration
}

// Restore replaces the model's state with a snapshot taken earlier, as an operator restoring a
// backup into a new data dir and restarting etcd on it does (etcdutl snapshot restore, with
// --bump-revision and --mark-compacted or without). What clients then see, as etcd 3.6 does it:
//
//   - the snapshot's key space, each key with the snapshot's create and mod revisions and version;
//     what was written after the snapshot is gone without a delete event;
//   - without a bump the revision goes back to the snapshot's, and later writes reuse revision
//     numbers that clients already saw; a watch resumed from the revision after its last event
//     waits for that revision (etcd's synced watchers skip every event below their start), so
//     it misses the events of the reused revisions; the snapshot's history serves older reads;
//   - with a bump the revision is the snapshot's plus the bump and, with MarkCompacted, everything
//     below it is compacted: a watch resumed from before gets ErrCompacted;
//   - the leases of the snapshot come back (etcdutl keeps the lease bucket) and, as the lessor
//     recovers them with no expiry and refreshes them when the member becomes leader, each lives
//     its full granted TTL plus ElectionTimeout from the restore; leases granted after the
//     snapshot are gone (a keepalive answers TTL 0);
//   - every watch stream breaks (the member restarted). The raft term of the new cluster is not
//     modelled (the model's keeps growing; clients do not read it).
func (m *Model) Restore(s Snapshot, o RestoreOptions) error {
	if (o.BumpRevision > 0) != o.MarkCompacted || o.BumpRevision < 0 {
		return ErrRestoreFlags
	}
	if o.ElectionTimeout == 0 {
		o.ElectionTimeout = time.Second
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for ws := range m.watches {
		ws.closeLocked(errRestarted)
	}
	m.rev, m.compactRev = s.rev, s.compactRev
	m.kvs, m.history = maps.Clone(s.kvs), slices.Clone(s.history)
	m.kvsGen++
	if o.BumpRevision > 0 {
		m.rev += o.BumpRevision
		m.compactRev, m.history = m.rev, nil // compacted at the bumped revision: no history left
	}
	now := m.clk.Now()
	m.leases = make(map[int64]*lease, len(s.leases))
	for id, ttl := range s.leases {
		m.leases[id] = &lease{id: id, ttl: ttl, expiry: now.Add(o.ElectionTimeout + time.Duration(ttl)*time.Second)}
	}
	m.raftTerm++
	m.restores++
	m.scheduleExpiryLocked()
	return nil
}

// Restores is how many restores the model went through.
func (m *Model) Restores() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.restores
}

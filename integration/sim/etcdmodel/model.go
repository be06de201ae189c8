package etcdmodel

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/baton-run/baton/clock"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ErrUnsupported is returned for a request or option the model does not implement.
var ErrUnsupported = errors.New("etcdmodel: unsupported")

func unsupported(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrUnsupported, fmt.Sprintf(format, args...))
}

// Bug plants a known defect in the model; the conformance tests must notice every one.
type Bug int

const (
	// NoBug is the honest model.
	NoBug Bug = iota
	// LeaseNeverExpires keeps leases (and their keys) alive past their TTL.
	LeaseNeverExpires
)

// Options configure a Model. Zero values take the defaults named on each field.
type Options struct {
	// Clock drives lease expiry. Default clock.Real() (fake time inside a synctest bubble).
	Clock clock.Clock
	// Rand draws lease IDs. Default: a PCG seeded with 1.
	Rand rand.Source
	// MinTTL is the smallest lease TTL granted, as etcd's minimum of 1.5 election timeouts.
	// Default 2s (etcd's with TickMs 100, ElectionMs 1000).
	MinTTL time.Duration
	// Transport carries every request and stream message. Default: delivered at once.
	Transport Transport
	// Bug plants a defect (conformance tests only).
	Bug Bug
	// OnCommit, when set, is called under the model's lock after every revision is made, with its
	// events and a view of the key space at that revision: the simulator's recorder of side effects.
	// It must not call the model.
	OnCommit func(rev int64, events []*mvccpb.Event, view View)
	// MemberID and ClusterID fill response headers. Defaults 1 and 1.
	MemberID, ClusterID uint64
}

// revision is what one revision changed: its events in order, each with the previous value.
type revision struct {
	rev    int64
	events []*mvccpb.Event
}

// Model is one etcd cluster as its clients see it.
type Model struct {
	opts Options
	clk  clock.Clock

	mu         sync.Mutex
	rev        int64
	compactRev int64
	raftTerm   uint64
	kvs        map[string]*mvccpb.KeyValue
	// kvsGen counts the changes of kvs (every put, delete, rollback and restore); oldest caches
	// View.Oldest's answers, by prefix, for the kvs of generation oldestGen: the simulator asks it for
	// every held term at every step, and most steps change no key.
	kvsGen, oldestGen uint64
	oldest            map[string]*mvccpb.KeyValue
	history           []revision // revisions > compactRev - 1, oldest first
	leases            map[int64]*lease
	noLeader          bool
	waiting           []chan struct{} // proposals waiting for a leader, oldest first (waitLeader)
	watches           map[*watchStream]struct{}
	expiry            clock.Timer
	closed            bool
	compacted         int // watches created below the compaction
	restores          int
}

// CompactedWatches is how many watches were created below the compaction (and cancelled with it).
func (m *Model) CompactedWatches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.compacted
}

// LeaseExpiry is when the model expires lease id, and whether it exists.
func (m *Model) LeaseExpiry(id int64) (time.Time, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return View{m}.LeaseExpiry(id)
}

// LeaseExpiry is Model.LeaseExpiry inside a View.
func (v View) LeaseExpiry(id int64) (time.Time, bool) {
	l, ok := v.m.leases[id]
	if !ok {
		return time.Time{}, false
	}
	return l.expiry, true
}

// Inspect runs f on the model's state under its lock: the simulator's checks of many keys at one
// step, with neither a lock nor a copy per read. f must not keep what it reads, nor call the model.
func (m *Model) Inspect(f func(View)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(View{m})
}

// New returns an empty model at revision 1 (etcd starts there).
func New(opts Options) *Model {
	if opts.Clock == nil {
		opts.Clock = clock.Real()
	}
	if opts.Rand == nil {
		opts.Rand = rand.NewPCG(1, 1)
	}
	if opts.MinTTL == 0 {
		opts.MinTTL = 2 * time.Second
	}
	if opts.Transport == nil {
		opts.Transport = direct{}
	}
	if opts.MemberID == 0 {
		opts.MemberID = 1
	}
	if opts.ClusterID == 0 {
		opts.ClusterID = 1
	}
	return &Model{
		opts: opts, clk: opts.Clock, rev: 1, raftTerm: 2,
		kvs: map[string]*mvccpb.KeyValue{}, leases: map[int64]*lease{},
		watches: map[*watchStream]struct{}{},
	}
}

// Close stops the expiry timer and ends every watch stream; the model answers nothing afterwards.
func (m *Model) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closed = true
	m.releaseNextLocked() // the waiting proposals fail, each passing the turn on
	if m.expiry != nil {
		m.expiry.Stop()
	}
	for w := range m.watches {
		w.closeLocked(errClosed)
	}
}

// Revision is the current revision.
func (m *Model) Revision() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.rev
}

// View is the key space as it stands, read under the model's lock (OnCommit's argument).
type View struct{ m *Model }

// Get returns the key's value (nil if absent); the caller must not change it.
func (v View) Get(key string) *mvccpb.KeyValue { return v.m.kvs[key] }

// Oldest returns the key under prefix with the lowest create revision (an election's leader), nil
// if there is none.
func (v View) Oldest(prefix string) *mvccpb.KeyValue {
	m := v.m
	if m.oldest == nil || m.oldestGen != m.kvsGen {
		m.oldest, m.oldestGen = map[string]*mvccpb.KeyValue{}, m.kvsGen
	}
	if kv, ok := m.oldest[prefix]; ok {
		return kv
	}
	var oldest *mvccpb.KeyValue
	for k, kv := range m.kvs { // no order needed: the simulator asks this at every step
		if strings.HasPrefix(k, prefix) && (oldest == nil || kv.CreateRevision < oldest.CreateRevision) {
			oldest = kv
		}
	}
	m.oldest[prefix] = oldest
	return oldest
}

// Prefix returns copies of the keys under prefix, in key order (the simulator's own view).
func (m *Model) Prefix(prefix string) []*mvccpb.KeyValue {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*mvccpb.KeyValue
	for _, k := range keysIn(m.kvs, []byte(prefix), []byte(clientv3.GetPrefixRangeEnd(prefix))) {
		c := *m.kvs[k]
		out = append(out, &c)
	}
	return out
}

// Oldest is View.Oldest for the simulator's own checks, outside a commit.
func (m *Model) Oldest(prefix string) *mvccpb.KeyValue {
	m.mu.Lock()
	defer m.mu.Unlock()
	if kv := (View{m}).Oldest(prefix); kv != nil {
		c := *kv
		return &c
	}
	return nil
}

// Get is the simulator's own view of one key (no transport, no revision change): nil if absent.
func (m *Model) Get(key string) *mvccpb.KeyValue {
	m.mu.Lock()
	defer m.mu.Unlock()
	if kv := m.kvs[key]; kv != nil {
		c := *kv
		return &c
	}
	return nil
}

func (m *Model) header() *pb.ResponseHeader {
	return &pb.ResponseHeader{ClusterId: m.opts.ClusterID, MemberId: m.opts.MemberID, Revision: m.rev, RaftTerm: m.raftTerm}
}

// waitLeader blocks while the model has no leader, as proposals wait in etcd. The proposals that
// waited go on one at a time, in the order they reached the model, when a leader returns: each passes
// the turn to the next as it takes the lock, so the next applies once this one unlocks (woken all at
// once, they would apply in the order the Go runtime ran them, and a seed would replay differently).
func (m *Model) waitLeader() error {
	m.mu.Lock()
	waited := false
	for m.noLeader && !m.closed {
		c := make(chan struct{})
		m.waiting = append(m.waiting, c)
		m.mu.Unlock()
		<-c
		m.mu.Lock()
		waited = true
	}
	if waited {
		m.releaseNextLocked() // it goes on (a leader, or Close): the next goes once this one unlocks
	}
	if m.closed {
		m.mu.Unlock()
		return errClosed
	}
	return nil // still locked: the caller applies under the lock
}

// releaseNextLocked gives the turn to the longest-waiting proposal.
func (m *Model) releaseNextLocked() {
	if len(m.waiting) > 0 {
		close(m.waiting[0])
		m.waiting = m.waiting[1:]
	}
}

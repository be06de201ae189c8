package sim

import (
	"context"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// NetFaults are the network's fault rates for one schedule (drawn per seed); zero is a perfect network.
type NetFaults struct {
	DelayRate    float64       // share of messages delayed
	MaxDelay     time.Duration // longest delay
	Reorder      bool          // deliver ready messages in a seeded order, not the oldest first
	DropRate     float64       // share of requests dropped before they are applied
	LostRespRate float64       // share of requests applied whose response is lost
	// DupRate is the share of requests applied twice: the response to the first is lost and the
	// client's retry of the very same request is applied again (clientv3 retries, a proxy, Baton's own
	// retry of a committed transaction); the caller gets the second answer. Never for stream messages
	// or keepalives (a gRPC stream does not replay them).
	DupRate float64
	Detect  time.Duration // how long a client takes to see a dropped request fail
}

type fate int

const (
	deliverIt fate = iota
	dropBefore
	dropAfter
	duplicate
)

// msg is one message in flight.
type msg struct {
	client, method, key string
	stream              bool
	at                  time.Time // deliverable from
	seen                bool
	fate                chan fate
}

// errLost is what a client sees when its request or response was lost: a broken connection.
var errLost = status.Error(codes.Unavailable, "sim: connection lost")

// Net is the simulated network between the processes and the etcd model, and the scheduler's queue.
type Net struct {
	rec    *Recorder
	rng    *rand.Rand
	faults NetFaults

	mu      sync.Mutex
	pending []*msg
	cut     map[string]bool      // partitioned or crashed clients
	hold    map[string]time.Time // stalled clients: nothing in or out until then
	notify  chan struct{}
	orphans sync.WaitGroup
	closed  bool
	dups    int // requests applied twice
}

// Duplicates is how many requests the network applied twice.
func (n *Net) Duplicates() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.dups
}

var _ etcdmodel.Transport = (*Net)(nil)

// NewNet returns a network drawing its choices from rng.
func NewNet(rec *Recorder, rng *rand.Rand, faults NetFaults) *Net {
	return &Net{rec: rec, rng: rng, faults: faults, cut: map[string]bool{}, hold: map[string]time.Time{}, notify: make(chan struct{}, 1)}
}

// Notify is signalled whenever a message is queued.
func (n *Net) Notify() <-chan struct{} { return n.notify }

// SetFaults changes the fault rates (the heal phase sets a perfect network).
func (n *Net) SetFaults(f NetFaults) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.faults = f
}

// Cut partitions a client from etcd (true) or heals it (false).
func (n *Net) Cut(client string, cut bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut[client] = cut
}

// Hold stalls a client until the given time: its messages, both ways, wait (a process paused longer
// than its lease TTL, as far as etcd and its watches can tell). The zero time releases it.
func (n *Net) Hold(client string, until time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.hold[client] = until
}

func isStream(method string) bool { return method == "WatchRequest" || method == "WatchResponse" }

func msgKey(client, method, label string, req any) string {
	h := fnv.New64a()
	h.Write([]byte(label))
	switch m := req.(type) {
	case interface{ Marshal() ([]byte, error) }: // etcd's gogo-generated messages
		b, _ := m.Marshal()
		h.Write(b)
	case string:
		h.Write([]byte(m))
	}
	return fmt.Sprintf("%s %s %016x", client, method, h.Sum64())
}

// Call implements etcdmodel.Transport: the message waits until the scheduler gives it a fate.
func (n *Net) Call(ctx context.Context, client, method string, req any, deliver func() error) error {
	stream, label := isStream(method), ""
	if stream {
		label = etcdmodel.WatchLabel(ctx)
	}
	m := &msg{client: client, method: method, key: msgKey(client, method, label, req), stream: stream, fate: make(chan fate, 1)}
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return errLost
	}
	n.pending = append(n.pending, m)
	n.mu.Unlock()
	select {
	case n.notify <- struct{}{}:
	default:
	}
	select {
	case f := <-m.fate:
		return n.finish(ctx, f, deliver)
	case <-ctx.Done():
	}
	if m.stream {
		n.remove(m)
		return ctx.Err()
	}
	// Sent is sent: the request still reaches etcd, nobody waits for the answer.
	n.orphans.Go(func() {
		f := <-m.fate
		if f != dropBefore {
			_ = deliver()
		}
		if f == duplicate {
			_ = deliver()
		}
	})
	return ctx.Err()
}

// finish carries out a fate. The server's work (which may wait for a raft leader) runs apart from
// the caller, who stops waiting when its context ends, as a gRPC client does.
func (n *Net) finish(ctx context.Context, f fate, deliver func() error) error {
	var err error
	if f != dropBefore {
		res := make(chan error, 1)
		n.orphans.Go(func() {
			if f == duplicate {
				_ = deliver() // applied; its answer is lost, and the retry is applied again
			}
			res <- deliver()
		})
		select {
		case err = <-res:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if f == deliverIt || f == duplicate {
		return err
	}
	n.mu.Lock()
	d := n.faults.Detect
	n.mu.Unlock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return errLost
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (n *Net) remove(m *msg) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, p := range n.pending {
		if p == m {
			n.pending = append(n.pending[:i], n.pending[i+1:]...)
			return
		}
	}
}

// Step gives the next deliverable message its fate and reports whether it did, and otherwise the
// earliest time a held message becomes deliverable (zero: none).
func (n *Net) Step(now time.Time) (bool, time.Time) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sort.SliceStable(n.pending, func(i, j int) bool { return n.pending[i].key < n.pending[j].key })
	var ready []int
	var next time.Time
	for i, m := range n.pending {
		if !m.seen {
			m.seen, m.at = true, now
			if n.rng.Float64() < n.faults.DelayRate {
				m.at = now.Add(time.Duration(n.rng.Int64N(int64(n.faults.MaxDelay) + 1)))
			}
		}
		if m.stream && n.cut[m.client] {
			continue // held until the partition heals
		}
		at := m.at
		if h := n.hold[m.client]; h.After(at) {
			at = h
		}
		if at.After(now) {
			if next.IsZero() || at.Before(next) {
				next = at
			}
			continue
		}
		ready = append(ready, i)
	}
	if len(ready) == 0 {
		return false, next
	}
	i := ready[0]
	if n.faults.Reorder {
		i = ready[n.rng.IntN(len(ready))]
	}
	m := n.pending[i]
	n.pending = append(n.pending[:i], n.pending[i+1:]...)
	f := deliverIt
	switch {
	case m.stream:
	case n.cut[m.client]:
		f = dropBefore
	case n.rng.Float64() < n.faults.DropRate:
		f = dropBefore
	case n.rng.Float64() < n.faults.LostRespRate:
		f = dropAfter
	case n.faults.DupRate > 0 && m.method != "LeaseKeepAlive" && n.rng.Float64() < n.faults.DupRate:
		f = duplicate // drawn only when on, so that the seeds from before keep their schedules
		n.dups++
	}
	n.rec.Add(m.client, "%s %s", []string{"deliver", "drop", "lost-response", "duplicate"}[f], m.key)
	m.fate <- f
	return true, time.Time{}
}

// Close drops every message still in flight and waits for the orphaned requests.
func (n *Net) Close() {
	n.mu.Lock()
	n.closed = true
	for _, m := range n.pending {
		m.fate <- dropBefore
	}
	n.pending = nil
	n.mu.Unlock()
	n.orphans.Wait()
}

// ProbeDuplicate is the probe hit by a schedule in which the network applied a request twice.
const ProbeDuplicate = "a request applied twice (a retry of a committed request)"

// drawDupRate draws a world's NetFaults.DupRate from a stream of its own ("<world>/duplicate"), so
// that the seeds from before keep their other draws: half the seeds duplicate 1-10 % of requests.
func drawDupRate(s Streams, world string) float64 {
	r := s.Rand(world + "/duplicate")
	if r.IntN(2) == 0 {
		return 0
	}
	return 0.01 + 0.09*r.Float64()
}

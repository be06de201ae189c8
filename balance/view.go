package balance

import (
	"context"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
)

// view is one worker's picture of the project's candidates, kept by one watch.
//
// A change of one queue's candidates wakes only the goroutine of that queue (changedFor), at once:
// waking every queue on every key event costs O(queues) per event, O(queues²) for a start-up, which
// at ten thousand queues is minutes of CPU. A change that can move every queue's decision (the set
// of workers, this worker's standing against its fair share, a roster change) is announced to all,
// by poke, at most every notifyEvery, so that a burst of them wakes each queue a few times.
type view struct {
	prefix string // <election prefix>/<project>/
	self   string // this worker's server ID
	clk    clock.Clock
	queues map[string]bool
	// onWorkers is called when the set of workers changed (after a watch event, not the first read).
	onWorkers func()

	mu         sync.Mutex
	cands      map[string]map[string]cand // queue -> candidate key -> who, since when
	deleted    map[string]time.Time       // queue -> when this worker's watch last saw a key of it go
	ids        map[string]int             // server ID -> candidate keys
	gone       map[string]time.Time       // server IDs that stood and stand no more, since when (vacant.go)
	goneFor    time.Duration              // how long a gone ID is remembered (0: for ever)
	loadedAt   time.Time                  // when the view was last read whole
	led        map[string]int             // server ID -> queues it leads (its key is the oldest)
	idsChanged bool                       // a server ID appeared or disappeared since the last announcement
	ch         chan struct{}              // closed and replaced on every announced change, of any queue
	qch        map[string]chan struct{}   // per queue, closed on a change of that queue or for all
	all        bool                       // the pending announcement is for every queue
	dirty      chan struct{}              // a change waits to be announced
	woken      marks                      // queues woken since dispatch last looked (idle.go)
	newLeaders marks                      // queues whose leader may have changed since deliverLeaders last looked
}

// marks is a set of queues (or all of them) marked since its reader last took it, and a token that
// says so; the view's mutex guards it.
type marks struct {
	queues map[string]bool
	all    bool
	due    chan struct{} // holds a token while something is marked
}

func newMarks() marks { return marks{queues: map[string]bool{}, due: make(chan struct{}, 1)} }

func (m *marks) mark(queue string) {
	m.queues[queue] = true
	token(m.due)
}

func (m *marks) markAll() {
	m.all = true
	token(m.due)
}

// take returns the marked queues and whether all were marked, and forgets them.
func (m *marks) take() (map[string]bool, bool) {
	qs, all := m.queues, m.all
	m.queues, m.all = map[string]bool{}, false
	return qs, all
}

// token puts a token in ch unless one is there.
func token(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

const notifyEvery = 5 * time.Millisecond

// cand is one candidate key: its server ID and create revision (the oldest key leads), and when this
// worker's watch brought it (zero for a key found by a read: it has stood for a while).
type cand struct {
	id  string
	rev int64
}

func newView(prefix, self string, queues []string) *view {
	v := &view{prefix: prefix, self: self, clk: clock.Real(), queues: map[string]bool{}, cands: map[string]map[string]cand{}, deleted: map[string]time.Time{},
		ids: map[string]int{}, gone: map[string]time.Time{}, led: map[string]int{}, ch: make(chan struct{}), qch: map[string]chan struct{}{}, dirty: make(chan struct{}, 1),
		woken: newMarks(), newLeaders: newMarks()}
	for _, q := range queues {
		v.queues[q] = true
	}
	return v
}

// changed returns a channel closed at the next announced change of any queue.
func (v *view) changed() <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.ch
}

// changedFor returns a channel closed at the next change of queue's candidates, or at the next
// change announced to every queue.
func (v *view) changedFor(queue string) <-chan struct{} {
	v.mu.Lock()
	defer v.mu.Unlock()
	c, ok := v.qch[queue]
	if !ok {
		c = make(chan struct{})
		v.qch[queue] = c
	}
	return c
}

// poke marks a change that may move every queue's decision; notify announces it to all.
func (v *view) poke() {
	v.mu.Lock()
	v.all = true
	v.mu.Unlock()
	v.touch()
}

// touch marks a change for the waiters of changed; notify announces it.
func (v *view) touch() { token(v.dirty) }

// wake wakes the waiters of one queue: a change that moves only its decision (a hint, the end of its
// takeover).
func (v *view) wake(queue string) {
	v.mu.Lock()
	v.wakeLocked(queue)
	v.mu.Unlock()
}

// wakeLocked wakes the waiters of one queue; the caller holds mu.
func (v *view) wakeLocked(queue string) {
	if c, ok := v.qch[queue]; ok {
		close(c)
		delete(v.qch, queue)
	}
	v.woken.mark(queue)
}

func (v *view) notify(ctx context.Context) {
	for {
		select {
		case <-v.dirty:
		case <-ctx.Done():
			return
		}
		v.mu.Lock()
		close(v.ch)
		v.ch = make(chan struct{})
		if v.all {
			for _, c := range v.qch {
				close(c)
			}
			v.qch, v.all = map[string]chan struct{}{}, false
			v.woken.markAll()
		}
		v.mu.Unlock()
		if !clock.Sleep(ctx, v.clk, notifyEvery) {
			return
		}
	}
}

// workers counts the distinct server IDs standing for this worker's queues, and this worker, which
// is live whether it stands anywhere or not.
func (v *view) workers() int {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.ids[v.self] > 0 {
		return len(v.ids)
	}
	return len(v.ids) + 1
}

// leads returns how many of this worker's queues id leads.
func (v *view) leads(id string) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.led[id]
}

func (v *view) othersStand(queue, self string) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, c := range v.cands[queue] {
		if c.id != self {
			return true
		}
	}
	return false
}

// leader returns the server ID of the queue's oldest candidate key, the one etcd lets lead; "" when
// nobody stands.
func (v *view) leader(queue string) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.leaderLocked(queue).ID
}

// apply records one key; the caller holds mu. It wakes the queue's waiters when the queue's leader
// changes, or when this worker leads it before or after (a leader's decisions read the whole line):
// a candidate that steps in or out behind another worker's leader moves no decision of this worker's,
// and at start-up every worker's thousands of candidates would otherwise wake every queue of every
// worker once per candidate.
func (v *view) apply(key, value string, rev int64, deleted bool) {
	rest, ok := strings.CutPrefix(key, v.prefix)
	if !ok {
		return
	}
	queue, _, ok := strings.Cut(rest, "/")
	if !ok || !v.queues[queue] {
		return
	}
	before := v.leaderLocked(queue)
	v.record(queue, key, value, rev, deleted)
	after := v.leaderLocked(queue)
	if after != before {
		v.newLeaders.mark(queue)
	}
	if after.ID != before.ID {
		if before.ID != "" {
			if v.led[before.ID]--; v.led[before.ID] <= 0 {
				delete(v.led, before.ID)
			}
		}
		if after.ID != "" {
			v.led[after.ID]++
		}
	}
	if after.ID != before.ID || before.ID == v.self || after.ID == v.self {
		v.wakeLocked(queue)
	}
}

// record stores or removes one candidate key of queue; the caller holds mu.
func (v *view) record(queue, key, value string, rev int64, deleted bool) {
	c := v.cands[queue]
	prior, had := c[key]
	if had {
		if v.ids[prior.id]--; v.ids[prior.id] <= 0 {
			delete(v.ids, prior.id)
			v.markGoneLocked(prior.id)
			v.idsChanged = true
		}
		delete(c, key)
	}
	if deleted {
		if had {
			v.deleted[queue] = v.clk.Now()
		}
		return
	}
	if c == nil {
		c = map[string]cand{}
		v.cands[queue] = c
	}
	c[key] = cand{id: value, rev: rev}
	if v.ids[value]++; v.ids[value] == 1 {
		delete(v.gone, value)
		v.idsChanged = true
	}
}

// load replaces what the view knows with a read of every candidate key, and announces it to every
// queue.
func (v *view) load(kvs []*mvccpb.KeyValue) {
	v.mu.Lock()
	before := v.ids
	v.cands, v.ids, v.led, v.deleted = map[string]map[string]cand{}, map[string]int{}, map[string]int{}, map[string]time.Time{}
	v.loadedAt = v.clk.Now()
	for _, kv := range kvs {
		v.apply(string(kv.Key), string(kv.Value), kv.CreateRevision, false)
	}
	v.newLeaders.markAll() // a queue nobody stands for any more is applied nothing
	for id := range before {
		if v.ids[id] == 0 {
			v.markGoneLocked(id)
		}
	}
	v.idsChanged = false // the poke below announces the read to every queue
	v.mu.Unlock()
	v.poke()
}

// run keeps the view: a read of every candidate key, then a watch from the next revision; after a
// broken watch, read again. ready is closed after the first read.
func (v *view) run(ctx context.Context, client *clientv3.Client, retryMax, relist time.Duration, ready chan struct{}) {
	listWatch(ctx, v.clk, client, v.prefix, retryMax, relist, ready, v.load, func(evs []*clientv3.Event) {
		v.mu.Lock()
		for _, ev := range evs {
			v.apply(string(ev.Kv.Key), string(ev.Kv.Value), ev.Kv.CreateRevision, ev.Type == clientv3.EventTypeDelete)
		}
		// Only a change of the set of workers may move every queue's decision (the fair share), and
		// onWorkers wakes them all when it does; the queues whose candidates changed were woken by
		// apply.
		workers := v.idsChanged
		v.idsChanged = false
		v.mu.Unlock()
		v.touch()
		if workers && v.onWorkers != nil {
			v.onWorkers()
		}
	})
}

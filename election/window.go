package election

import (
	"container/list"
	"context"
	"sync"
	"time"

	"github.com/baton-run/baton/clock"
)

// window bounds the campaign requests an Elector has in flight, and adapts the bound to how fast etcd
// answers them: additive increase, multiplicative decrease, as TCP does with its congestion window.
//
// Why it adapts: etcd answers a lease keepalive only once its apply loop has caught up with what was
// committed before it, so every campaign request in flight is a request in front of the session's
// next keepalive. A fixed bound that suits an idle etcd is a backlog of seconds on a slow one (a
// starved CPU, a slow disk, many workers starting at once): the keepalive comes back after the local
// deadline, the session is lost, every campaign starts over on a new session, and the new burst can
// lose that one too. Seen twice with 5 workers over 200 queues on a 2-core machine busy compiling:
// every session was lost at its first deadline for minutes, and no queue stayed led.
//
// The window keeps the answer time of campaign requests under target, half the time a keepalive has
// to come back in (it waits behind the same backlog): an answer slower than target halves the bound,
// at most once per target (one backlog's slow answers count once); an answer faster than target/2
// raises it by one, up to max. Campaigns then go as fast as etcd applies them and no faster.
type window struct {
	clock  clock.Clock
	max    int
	target time.Duration

	mu       sync.Mutex
	limit    int
	inFlight int
	lastCut  time.Time
	waiters  list.List // of chan struct{}, first come first served; closed when granted a slot
}

func newWindow(cfg Config) *window {
	return &window{
		clock:  cfg.Clock,
		max:    cfg.MaxCampaignRequests,
		target: (cfg.TTL - cfg.SafetyMargin - cfg.KeepAliveInterval) / 2,
		limit:  cfg.MaxCampaignRequests,
	}
}

// acquire waits for a slot, in arrival order, or returns ctx's error.
func (w *window) acquire(ctx context.Context) error {
	w.mu.Lock()
	if w.inFlight < w.limit && w.waiters.Len() == 0 {
		w.inFlight++
		w.mu.Unlock()
		return nil
	}
	ready := make(chan struct{})
	elem := w.waiters.PushBack(ready)
	w.mu.Unlock()
	select {
	case <-ready:
		return nil
	case <-ctx.Done():
		w.mu.Lock()
		select {
		case <-ready:
			// Granted as the context ended: hand the slot on.
			w.inFlight--
			w.grantLocked()
		default:
			w.waiters.Remove(elem)
		}
		w.mu.Unlock()
		return ctx.Err()
	}
}

// release frees a slot held for took and adapts the bound to it.
func (w *window) release(took time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.inFlight--
	switch now := w.clock.Now(); {
	case took > w.target:
		if now.Sub(w.lastCut) >= w.target {
			w.limit = max(1, w.limit/2)
			w.lastCut = now
		}
	case took <= w.target/2 && w.limit < w.max:
		w.limit++
	}
	w.grantLocked()
}

// grantLocked hands free slots to the waiters in order.
func (w *window) grantLocked() {
	for w.inFlight < w.limit && w.waiters.Len() > 0 {
		close(w.waiters.Remove(w.waiters.Front()).(chan struct{}))
		w.inFlight++
	}
}

// bound returns the current bound, for tests.
func (w *window) bound() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.limit
}

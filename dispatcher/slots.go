package dispatcher

import (
	"context"
	"sync"
)

// slots bounds a Producer's attempts in flight per workflow ID (ProducerConfig.MaxInFlight). A
// workflow ID's semaphore exists while someone holds or waits for one of its slots, so a Producer
// that has called many queues over its life keeps nothing for the idle ones.
type slots struct {
	limit int
	mu    sync.Mutex
	sems  map[string]*sem
}

type sem struct {
	ch    chan struct{}
	users int // holders and waiters
}

func newSlots(limit int) *slots { return &slots{limit: limit, sems: map[string]*sem{}} }

// acquire waits for a slot of id, or returns ctx's error; release gives the slot back.
func (s *slots) acquire(ctx context.Context, id string) (release func(), err error) {
	s.mu.Lock()
	sm := s.sems[id]
	if sm == nil {
		sm = &sem{ch: make(chan struct{}, s.limit)}
		s.sems[id] = sm
	}
	sm.users++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		if sm.users--; sm.users == 0 {
			delete(s.sems, id)
		}
		s.mu.Unlock()
	}
	select {
	case sm.ch <- struct{}{}:
		return func() { <-sm.ch; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// inUse returns how many workflow IDs have a semaphore (tests).
func (s *slots) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sems)
}

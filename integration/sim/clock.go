package sim

import (
	"math/rand/v2"
	"sync"

	"github.com/baton-run/baton/clock"
)

// nodeClock is the bubble's clock (clock.Real inside a synctest bubble is fake time) with a seeded
// random source, so that clock.Jitter draws from the schedule's seed.
type nodeClock struct {
	clock.Clock
	mu  sync.Mutex
	src rand.Source
	sk  skew // the process's clock rate (skew.go); zero: the bubble's own
}

func newNodeClock(src rand.Source) *nodeClock { return &nodeClock{Clock: clock.Real(), src: src} }

// NewClock is the bubble's clock with the seed's stream of name as its random source (clock.Jitter):
// a process's clock in a world.
func (s Streams) NewClock(name string) clock.Clock { return newNodeClock(s.Source(name)) }

func (c *nodeClock) Rand() rand.Source { return c }

// Uint64 makes nodeClock a rand.Source safe for the node's goroutines.
func (c *nodeClock) Uint64() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.src.Uint64()
}

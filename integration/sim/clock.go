package sim

import (
	"math/rand/v2"

	"github.com/baton-run/baton/clock"
)

// nodeClock is the bubble's clock (clock.Real inside a synctest bubble is fake time) with a seeded
// random source, so that clock.Jitter draws from the schedule's seed.
//
// Each draw (each clock.Jitter or clock.Around) gets a source of its own, seeded by the clock's
// stream and the instant of the draw, not the next values of one shared stream: the goroutines of a
// process that draw at the same instant (the queues' retries after one lost session) run in an order
// the Go runtime chooses, and a shared stream would give them their values in that order, so that a
// seed replayed differently. Draws at one instant with one bound get one value; a seed still spreads
// a process's retries over time, and every process has a stream of its own.
type nodeClock struct {
	clock.Clock
	seed, stream uint64
	sk           skew // the process's clock rate (skew.go); zero: the bubble's own
}

func newNodeClock(s Streams, name string) *nodeClock {
	return &nodeClock{Clock: clock.Real(), seed: s.Seed, stream: streamOf(name)}
}

// NewClock is the bubble's clock with the seed's stream of name as its random source (clock.Jitter):
// a process's clock in a world.
func (s Streams) NewClock(name string) clock.Clock { return newNodeClock(s, name) }

// Rand is the source of one draw at the clock's now.
func (c *nodeClock) Rand() rand.Source {
	return rand.NewPCG(c.seed^uint64(c.Now().UnixNano())*0x9e3779b97f4a7c15, c.stream)
}

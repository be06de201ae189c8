package sim

import (
	"hash/fnv"
	"math/rand/v2"
)

// Streams splits one seed into independent named PRNG streams.
type Streams struct{ Seed uint64 }

// Rand returns the stream called name: the same seed and name give the same sequence.
func (s Streams) Rand(name string) *rand.Rand { return rand.New(s.Source(name)) }

// Source is the stream called name as a rand.Source (for clock.Clock.Rand and the etcd model).
func (s Streams) Source(name string) rand.Source { return rand.NewPCG(s.Seed, streamOf(name)) }

// streamOf is the PCG stream of a name.
func streamOf(name string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}

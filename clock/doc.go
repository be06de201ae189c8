// Package clock is the small time abstraction Baton's timing-sensitive code is written against, so
// that lease deadlines, safety margins and reconcile intervals can be tested exactly with a fake clock
// instead of with sleeps.
//
// It is the one home of time and randomness in the library: outside this package, library code reads
// the time, waits, ticks and draws jitter only through an injected Clock (every component's
// Config.Clock, baton.Config.Clock at the root), never through package time's clock functions or
// math/rand's global source. The repository test TestLibraryReadsTimeOnlyThroughClock holds it so,
// with its few exceptions listed and explained there. A Node built on a Fake therefore runs on the
// Fake's time and on its seeded randomness alone, which is what a deterministic simulator needs.
//
// Real is the wall clock and the process's random source; Fake is advanced by hand, and its jitter
// comes from a seeded generator (Fake.Seed), so that a run on it can be replayed.
package clock

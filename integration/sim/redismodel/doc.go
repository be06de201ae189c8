// Package redismodel is the simulator's Redis: one miniredis per simulated Redis server, reached by
// the real go-redis client through a Dialer that returns one end of a net.Pipe (miniredis serves the
// other), so that Baton's real Lua scripts run inside a testing/synctest bubble. TTLs and TIME
// follow the bubble's clock (miniredis's ClockTTL over time.Now, which a bubble fakes), so keys
// expire as simulated time passes and an entry's updated_ms is simulated Redis time.
//
// A [Server] survives the faults the simulator draws: FLUSHALL (the data goes, connections stay),
// a restart without data (a fresh instance; every connection breaks), an unavailability window
// (dials are refused and open connections break), and a delay on every reply (the command is
// applied at once; a reply later than the caller's deadline is lost, as on a slow network). A
// Server must be closed before its bubble ends: its goroutines and its clients' pipes end then.
package redismodel

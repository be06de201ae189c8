package clock

import (
	"context"
	"math/rand/v2"
	"time"
)

// Clock tells the time, makes timers and tickers, and is the source of the randomness that spreads
// retries out (Jitter).
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed, as time.AfterFunc does; the Timer's C
	// is nil. Stop before it fired keeps f from being called.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTicker delivers the time every d, as time.NewTicker does (ticks a slow receiver misses are
	// dropped); d must be positive.
	NewTicker(d time.Duration) Ticker
	// Rand is the random source Jitter draws from: the process's own for Real, a seeded one for a
	// Fake. It is safe for concurrent use.
	Rand() rand.Source
}

// Timer is the part of *time.Timer that Baton uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Ticker is the part of *time.Ticker that Baton uses.
type Ticker interface {
	C() <-chan time.Time
	Stop()
	Reset(d time.Duration)
}

// Real returns the wall clock (with Go's monotonic readings, so deadlines are immune to wall-clock
// steps).
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

func (realClock) NewTicker(d time.Duration) Ticker { return realTicker{time.NewTicker(d)} }

// Rand is the process's random source, as math/rand/v2's top-level functions use it.
func (realClock) Rand() rand.Source { return globalSource{} }

type globalSource struct{}

func (globalSource) Uint64() uint64 { return rand.Uint64() }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time   { return r.t.C }
func (r realTicker) Stop()                 { r.t.Stop() }
func (r realTicker) Reset(d time.Duration) { r.t.Reset(d) }

// Sleep waits d on c and reports true, or false as soon as ctx ends.
func Sleep(ctx context.Context, c Clock, d time.Duration) bool {
	t := c.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}

// Jitter returns a random duration in [d/2, d], drawn from c's source, so that retries of many
// processes spread out.
func Jitter(c Clock, d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + time.Duration(rand.New(c.Rand()).Int64N(int64(d/2+1)))
}

// Around returns a random duration in [d - d/10, d + d/10], drawn from c's source: a period that
// many processes keep (a reconcile cycle) without falling into step.
func Around(c Clock, d time.Duration) time.Duration {
	if d <= 0 {
		return d
	}
	return d - d/10 + time.Duration(rand.New(c.Rand()).Int64N(int64(d/5+1)))
}

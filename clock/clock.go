// Package clock is the small time abstraction Baton's timing-sensitive code is written against, so
// that lease deadlines, safety margins and reconcile intervals can be tested exactly with a fake clock
// instead of with sleeps.
package clock

import (
	"context"
	"math/rand/v2"
	"time"
)

// Clock tells the time and makes timers.
type Clock interface {
	Now() time.Time
	NewTimer(d time.Duration) Timer
	// AfterFunc calls f in its own goroutine once d has passed, as time.AfterFunc does; the Timer's C
	// is nil. Stop before it fired keeps f from being called.
	AfterFunc(d time.Duration, f func()) Timer
}

// Timer is the part of *time.Timer that Baton uses.
type Timer interface {
	C() <-chan time.Time
	Stop() bool
	Reset(d time.Duration) bool
}

// Real returns the wall clock (with Go's monotonic readings, so deadlines are immune to wall-clock
// steps).
func Real() Clock { return realClock{} }

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) NewTimer(d time.Duration) Timer { return realTimer{time.NewTimer(d)} }

func (realClock) AfterFunc(d time.Duration, f func()) Timer { return realTimer{time.AfterFunc(d, f)} }

type realTimer struct{ t *time.Timer }

func (r realTimer) C() <-chan time.Time        { return r.t.C }
func (r realTimer) Stop() bool                 { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) bool { return r.t.Reset(d) }

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

// Jitter returns a random duration in [d/2, d], so that retries of many processes spread out.
func Jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

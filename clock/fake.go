package clock

import (
	"math/rand/v2"
	"sort"
	"sync"
	"time"
)

// Fake is a manually advanced clock for tests. Timers and tickers fire when Advance moves the time to
// or past their deadline; their channels have a buffer of one, as time.Timer's and time.Ticker's do.
// Its randomness (Rand, and so Jitter) comes from a generator seeded with 0 until Seed says
// otherwise, so a run on a Fake draws the same jitter every time.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{}
	rand    lockedSource
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock that reads start.
func NewFake(start time.Time) *Fake {
	f := &Fake{now: start, changed: make(chan struct{})}
	f.Seed(0)
	return f
}

// Seed restarts the fake's random source from seed: a simulator gives each node's clock its own.
func (f *Fake) Seed(seed uint64) {
	f.rand.mu.Lock()
	defer f.rand.mu.Unlock()
	f.rand.src = rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)
}

// Rand returns the fake's seeded random source.
func (f *Fake) Rand() rand.Source { return &f.rand }

// lockedSource is a seeded generator shared by every goroutine that draws jitter from one clock.
type lockedSource struct {
	mu  sync.Mutex
	src *rand.PCG
}

func (s *lockedSource) Uint64() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.src.Uint64()
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// NewTimer returns a timer that fires once the fake time reaches Now()+d.
func (f *Fake) NewTimer(d time.Duration) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, c: make(chan time.Time, 1)}
	f.arm(t, d)
	return t
}

// AfterFunc returns a timer that calls f in its own goroutine once the fake time reaches Now()+d.
func (f *Fake) AfterFunc(d time.Duration, fn func()) Timer {
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, fn: fn}
	f.arm(t, d)
	return t
}

// NewTicker returns a ticker that fires every d of fake time, the first time at Now()+d. An Advance
// past several of its ticks delivers one, as a time.Ticker whose receiver is slow does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for Fake.NewTicker")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	t := &fakeTimer{clock: f, c: make(chan time.Time, 1), period: d}
	f.arm(t, d)
	return fakeTicker{t}
}

// Advance moves the time forward by d and fires every timer that is due, in deadline order; a ticker
// that fired is armed again for its next tick after the new time.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	sort.Slice(f.timers, func(i, j int) bool { return f.timers[i].at.Before(f.timers[j].at) })
	kept := f.timers[:0]
	for _, t := range f.timers {
		if t.at.After(f.now) {
			kept = append(kept, t)
			continue
		}
		t.fire(f.now)
		if t.period > 0 {
			t.at = t.at.Add((f.now.Sub(t.at)/t.period + 1) * t.period)
			kept = append(kept, t)
			continue
		}
		t.armed = false
	}
	f.timers = kept
}

// Timers returns how many timers are armed; tests use it to wait until the code under test has
// armed the timer it is about to be woken by.
func (f *Fake) Timers() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.timers)
}

// NextDue returns when the earliest armed timer fires; ok is false when none is armed. A test that
// measures how long the code under test waits advances by exactly that.
func (f *Fake) NextDue() (due time.Time, ok bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.timers {
		if !ok || t.at.Before(due) {
			due, ok = t.at, true
		}
	}
	return due, ok
}

// Changed returns a channel that is closed the next time a timer is armed or stopped.
func (f *Fake) Changed() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changed
}

func (f *Fake) notify() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// arm must be called with f.mu held.
func (f *Fake) arm(t *fakeTimer, d time.Duration) {
	t.at = f.now.Add(d)
	if d <= 0 {
		t.fire(f.now)
		f.notify()
		return
	}
	if !t.armed {
		f.timers = append(f.timers, t)
	}
	t.armed = true
	f.notify()
}

// disarm must be called with f.mu held.
func (f *Fake) disarm(t *fakeTimer) bool {
	if !t.armed {
		return false
	}
	t.armed = false
	for i, o := range f.timers {
		if o == t {
			f.timers = append(f.timers[:i], f.timers[i+1:]...)
			break
		}
	}
	f.notify()
	return true
}

type fakeTimer struct {
	clock  *Fake
	c      chan time.Time // nil for an AfterFunc timer
	fn     func()         // an AfterFunc timer's
	period time.Duration  // a ticker's; 0 for a timer
	at     time.Time
	armed  bool
}

// fire delivers now on the timer's channel, or calls its function in its own goroutine.
func (t *fakeTimer) fire(now time.Time) {
	if t.fn != nil {
		go t.fn()
		return
	}
	select {
	case t.c <- now:
	default:
	}
}

func (t *fakeTimer) C() <-chan time.Time { return t.c }

func (t *fakeTimer) Stop() bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	return t.clock.disarm(t)
}

func (t *fakeTimer) Reset(d time.Duration) bool {
	t.clock.mu.Lock()
	defer t.clock.mu.Unlock()
	was := t.clock.disarm(t)
	t.clock.arm(t, d)
	return was
}

// fakeTicker is a fakeTimer with a period: Advance arms it again each time it fires.
type fakeTicker struct{ t *fakeTimer }

func (k fakeTicker) C() <-chan time.Time { return k.t.c }

func (k fakeTicker) Stop() { k.t.Stop() }

func (k fakeTicker) Reset(d time.Duration) {
	if d <= 0 {
		panic("clock: non-positive interval for Ticker.Reset")
	}
	f := k.t.clock
	f.mu.Lock()
	defer f.mu.Unlock()
	f.disarm(k.t)
	k.t.period = d
	f.arm(k.t, d)
}

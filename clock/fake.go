package clock

import (
	"sort"
	"sync"
	"time"
)

// Fake is a manually advanced clock for tests. Timers fire when Advance moves the time to or past
// their deadline; a timer's channel has a buffer of one, as time.Timer's does.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*fakeTimer
	changed chan struct{}
}

var _ Clock = (*Fake)(nil)

// NewFake returns a fake clock that reads start.
func NewFake(start time.Time) *Fake {
	return &Fake{now: start, changed: make(chan struct{})}
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

// Advance moves the time forward by d and fires every timer that is due, in deadline order.
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
		t.armed = false
		t.fire(f.now)
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
	clock *Fake
	c     chan time.Time // nil for an AfterFunc timer
	fn    func()         // an AfterFunc timer's
	at    time.Time
	armed bool
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

package balance

import (
	"context"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
)

// closed reports whether ch is closed, waiting up to a generous bound for one that should close (the
// notifier runs on its own goroutine) and not at all for one that should not.
func closed(ch <-chan struct{}, wait bool) bool {
	if !wait {
		select {
		case <-ch:
			return true
		default:
			return false
		}
	}
	select {
	case <-ch:
		return true
	case <-time.After(10 * time.Second):
		return false
	}
}

// Announcements: a change of one queue (wake) reaches that queue's waiters at once and no other's; a
// change for every queue (poke) reaches them all through the notifier, and a burst of them during the
// notifier's pause of notifyEvery is announced once, when the pause ends.
func TestViewAnnouncements(t *testing.T) {
	fake := clock.NewFake(t0)
	v := newView("/e/p/", "w0", []string{"a", "b"})
	v.clk = fake
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { v.notify(ctx) })

	a, b := v.changedFor("a"), v.changedFor("b")
	v.wake("a")
	if !closed(a, false) || closed(b, false) {
		t.Fatal("wake(a): a's waiters not woken at once, or b's woken")
	}
	if qs, all := v.takeWoken(); all || !maps.Equal(qs, map[string]bool{"a": true}) {
		t.Fatalf("wake(a) marked %v (all %v) for dispatch, want a only", qs, all)
	}

	changed := v.changed()
	v.touch() // a change of some queue's candidates: the waiters of any change, not every queue's
	if !closed(changed, true) || closed(b, false) {
		t.Fatal("touch: changed() not announced, or b's waiters woken")
	}
	waitPause := func() {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); fake.Timers() == 0; {
			if time.Now().After(deadline) {
				t.Fatal("the notifier never paused")
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitPause()

	// Pokes during the pause wait for its end, and are announced once.
	changed = v.changed()
	for range 3 {
		v.poke()
	}
	if closed(b, false) || closed(changed, false) {
		t.Fatal("poked during the notifier's pause: announced before it ended")
	}
	fake.Advance(notifyEvery)
	if !closed(b, true) || !closed(changed, true) {
		t.Fatal("the pause ended: the pokes were not announced to every queue")
	}
	if _, all := v.takeWoken(); !all {
		t.Fatal("a poke did not mark every queue for dispatch")
	}
}

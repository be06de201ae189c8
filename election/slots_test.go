package election

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
)

func testWindow(t *testing.T, maxRequests int) (*Elector, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(time.Unix(1_000_000, 0))
	cfg := Config{TTL: 10 * time.Second, MaxCampaignRequests: maxRequests, Clock: clk}.withDefaults()
	return &Elector{cfg: cfg, slots: newWindow(cfg)}, clk
}

func (w *window) held() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.inFlight
}

// Campaign requests beyond MaxCampaignRequests wait in the process, and a waiter gives up with its
// context: a start-up of thousands of campaigns must not reach etcd at once.
func TestCampaignRequestsAreBounded(t *testing.T) {
	e, _ := testWindow(t, 3)
	var inFlight, most atomic.Int64
	release := make(chan struct{})
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, _ = inSlot(context.Background(), e, func() (int, error) {
				n := inFlight.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				<-release
				inFlight.Add(-1)
				return 0, nil
			})
		})
	}
	for inFlight.Load() < 3 { // the first three are in flight
		runtime.Gosched()
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := inSlot(ctx, e, func() (int, error) { t.Error("a request ran past the bound"); return 0, nil }); !errors.Is(err, context.Canceled) || !errors.Is(err, errNotSent) {
		t.Errorf("a waiter whose context ended: %v, want context.Canceled, marked errNotSent", err)
	}
	close(release)
	wg.Wait()
	if most.Load() != 3 {
		t.Errorf("at most %d requests in flight, want 3", most.Load())
	}
	if n := e.slots.held(); n != 0 {
		t.Errorf("%d slots still held after every request returned", n)
	}
}

// The window follows etcd's answer time: slow answers halve it (once per target, however many come
// back slow from the same backlog), down to one request; fast answers raise it by one each, up to
// MaxCampaignRequests. With the defaults (TTL 10s) the target is (10s - 2.5s - 3.33s)/2 = 2.08s.
func TestCampaignWindowAdaptsToAnswerTime(t *testing.T) {
	e, clk := testWindow(t, 64)
	w := e.slots
	if w.target != (10*time.Second-2500*time.Millisecond-10*time.Second/3)/2 {
		t.Fatalf("target %v", w.target)
	}
	answer := func(took time.Duration) {
		t.Helper()
		if _, err := inSlot(context.Background(), e, func() (int, error) { clk.Advance(took); return 0, nil }); err != nil {
			t.Fatal(err)
		}
	}
	slow, fast := 2*w.target, w.target/4
	answer(slow)
	if got := w.bound(); got != 32 {
		t.Fatalf("after a slow answer: bound %d, want 32", got)
	}
	// Answers of the same backlog come back together: within target of the cut, no further cut.
	w.acquireNow(t)
	w.release(slow)
	if got := w.bound(); got != 32 {
		t.Fatalf("a second slow answer at once: bound %d, want 32 (one cut per target)", got)
	}
	for want := 16; want >= 1; want /= 2 {
		answer(slow) // each takes 2 × target, so the next cut is due
		if got := w.bound(); got != want {
			t.Fatalf("bound %d, want %d", got, want)
		}
	}
	answer(slow)
	if got := w.bound(); got != 1 {
		t.Fatalf("bound %d, want at least 1", got)
	}
	// Between target/2 and target: hold.
	answer(3 * w.target / 4)
	if got := w.bound(); got != 1 {
		t.Fatalf("after an answer within target: bound %d, want 1", got)
	}
	for want := 2; want <= 64; want++ {
		answer(fast)
		if got := w.bound(); got != want {
			t.Fatalf("bound %d, want %d", got, want)
		}
	}
	answer(fast)
	if got := w.bound(); got != 64 {
		t.Fatalf("bound %d, want MaxCampaignRequests 64", got)
	}
}

// acquireNow takes a slot that must be free.
func (w *window) acquireNow(t *testing.T) {
	t.Helper()
	if err := w.acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A cut frees no slot by itself: requests already in flight finish, and the waiters go in their
// order of arrival as the in-flight count falls below the new bound; a waiter that gives up passes
// its turn on.
func TestCampaignWindowWaitersGoInOrder(t *testing.T) {
	e, _ := testWindow(t, 2)
	w := e.slots
	w.acquireNow(t)
	w.acquireNow(t)
	granted := make([]chan struct{}, 3)
	gaveUp, giveUp := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 3 {
		ctx := context.Background()
		if i == 1 {
			ctx = gaveUp
		}
		granted[i] = make(chan struct{})
		wg.Go(func() {
			if w.acquire(ctx) == nil {
				close(granted[i])
			}
		})
		waitersAre(w, i+1)
	}
	closed := func(i int) bool {
		select {
		case <-granted[i]:
			return true
		default:
			return false
		}
	}
	giveUp()
	waitersAre(w, 2)
	// A release grants under the window's lock, so once it returns the waiters left are final.
	w.release(0)
	select {
	case <-granted[0]:
	case <-time.After(10 * time.Second):
		t.Fatal("the first slot freed did not go to the first waiter")
	}
	w.mu.Lock()
	left := w.waiters.Len()
	w.mu.Unlock()
	if left != 1 {
		t.Fatalf("%d waiters left after one slot was freed, want 1 (the third)", left)
	}
	w.release(0)
	wg.Wait()
	if !closed(0) || closed(1) || !closed(2) {
		t.Fatalf("granted: first %v, second %v, third %v; want the first and third (the second gave up)", closed(0), closed(1), closed(2))
	}
	if n := w.held(); n != 2 {
		t.Fatalf("%d slots held, want 2", n)
	}
}

func waitersAre(w *window, n int) {
	for {
		w.mu.Lock()
		got := w.waiters.Len()
		w.mu.Unlock()
		if got == n {
			return
		}
		runtime.Gosched()
	}
}

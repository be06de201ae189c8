package election

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// Campaign requests beyond MaxCampaignRequests wait in the process, and a waiter gives up with its
// context: a start-up of thousands of campaigns must not reach etcd at once.
func TestCampaignRequestsAreBounded(t *testing.T) {
	e := &Elector{slots: make(chan struct{}, 3)}
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
	for len(e.slots) < 3 { // the first three are in flight
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
}

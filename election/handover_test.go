package election

import (
	"sync"
	"testing"
	"testing/synctest"
)

// A stop resigns every term in one round: as many at once as there are slots, the next as soon as one
// is given back, and a term that ends on its own while it waits takes no slot.
func TestHandOversBoundTheResignsUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const slots, terms = 3, 10
		h := make(handOvers, slots)
		var mu sync.Mutex
		under, most := 0, 0
		release := make(chan struct{})
		var wg sync.WaitGroup
		for range terms {
			wg.Go(func() {
				if !h.take(nil) {
					t.Error("take without a done channel returned false")
					return
				}
				mu.Lock()
				under++
				most = max(most, under)
				mu.Unlock()
				<-release
				mu.Lock()
				under--
				mu.Unlock()
				h.give()
			})
		}
		synctest.Wait() // every term that can take a slot has one; the rest wait
		mu.Lock()
		if under != slots {
			t.Errorf("%d hand-overs under way with %d slots and %d terms, want %d", under, slots, terms, slots)
		}
		mu.Unlock()
		for range terms {
			release <- struct{}{} // one hand-over ends: exactly one waiter starts
			synctest.Wait()
		}
		wg.Wait()
		if most != slots {
			t.Errorf("at most %d hand-overs at once, want %d", most, slots)
		}

		// A term that ends while every slot is taken leaves the line without one.
		for range slots {
			h.take(nil)
		}
		done := make(chan struct{})
		got := make(chan bool)
		go func() { got <- h.take(done) }()
		synctest.Wait()
		select {
		case <-got:
			t.Fatal("take returned while every slot was held and the term lived")
		default:
		}
		close(done)
		if <-got {
			t.Fatal("take returned a slot to a term that ended while it waited")
		}
		if len(h) != slots {
			t.Fatalf("%d slots held, want %d (the ended term took none)", len(h), slots)
		}
	})
}

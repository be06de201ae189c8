package baton

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
)

// A stop's steps (quiesce, deregister) take one round for all the queues, limit at once: every
// queue once, never more than limit together, and the round does not wait for one queue to finish
// before it starts the next while a slot is free.
func TestInRoundBoundsTheQueuesUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const limit, n = 4, 25
		queues := make([]string, n)
		for i := range queues {
			queues[i] = fmt.Sprintf("q%d", i)
		}
		var mu sync.Mutex
		under, most := 0, 0
		var seen []string
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			inRound(queues, limit, func(q string) {
				mu.Lock()
				under++
				most = max(most, under)
				seen = append(seen, q)
				mu.Unlock()
				<-release
				mu.Lock()
				under--
				mu.Unlock()
			})
			close(done)
		}()
		synctest.Wait()
		mu.Lock()
		if under != limit {
			t.Errorf("%d queues under way at once, want the limit %d", under, limit)
		}
		mu.Unlock()
		for range n {
			release <- struct{}{}
		}
		<-done
		slices.Sort(seen)
		want := slices.Clone(queues)
		slices.Sort(want)
		if most != limit || !slices.Equal(seen, want) {
			t.Errorf("at most %d at once over %v, want %d at most and every queue once", most, seen, limit)
		}
	})
}

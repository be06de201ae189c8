package dispatcher

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A queue's attempts wait for one of its slots; another queue's do not; a wait ends with its ctx;
// nothing is kept for a queue nobody uses any more.
func TestSlotsBoundAttemptsPerQueue(t *testing.T) {
	s := newSlots(2)
	ctx := t.Context()
	r1, err1 := s.acquire(ctx, "a")
	r2, err2 := s.acquire(ctx, "a")
	if err1 != nil || err2 != nil {
		t.Fatalf("acquire: %v %v", err1, err2)
	}
	rb, err := s.acquire(ctx, "b")
	if err != nil {
		t.Fatalf("another queue waited: %v", err)
	}
	rb()

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := s.acquire(short, "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a third attempt on a full queue: %v, want its ctx's deadline", err)
	}

	got := make(chan func())
	go func() {
		r, err := s.acquire(ctx, "a")
		if err != nil {
			t.Error(err)
		}
		got <- r
	}()
	select {
	case <-got:
		t.Fatal("a third attempt got a slot while two were held")
	case <-time.After(20 * time.Millisecond):
	}
	r1()
	r3 := <-got
	r2()
	r3()
	if n := s.inUse(); n != 0 {
		t.Fatalf("%d semaphores kept after every slot was given back", n)
	}
}

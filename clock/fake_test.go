package clock

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

func TestFakeTimersFireInOrderWhenDue(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	a := f.NewTimer(2 * time.Second)
	b := f.NewTimer(time.Second)
	f.Advance(time.Second - 1)
	select {
	case <-b.C():
		t.Fatal("timer fired early")
	default:
	}
	f.Advance(1)
	if got := <-b.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("b fired at %v", got)
	}
	if f.Timers() != 1 {
		t.Fatalf("armed timers = %d, want 1", f.Timers())
	}
	if !a.Reset(time.Second) {
		t.Fatal("Reset of an armed timer must report it was armed")
	}
	f.Advance(time.Second)
	<-a.C()
	if a.Stop() {
		t.Fatal("Stop of a fired timer must report false")
	}
	c := f.NewTimer(0)
	<-c.C() // a zero duration fires at once, like time.NewTimer
}

func TestRealClock(t *testing.T) {
	c := Real()
	before := time.Now()
	if c.Now().Before(before) {
		t.Fatal("Real().Now() went backwards")
	}
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	if tm.Stop() {
		t.Fatal("Stop after firing must report false")
	}
}

func TestJitterBounds(t *testing.T) {
	for _, d := range []time.Duration{0, 1, 2, time.Millisecond, time.Second} {
		for range 200 {
			if j := Jitter(d); j < d/2 || j > d {
				t.Fatalf("Jitter(%v) = %v, outside [d/2, d]", d, j)
			}
		}
	}
}

func TestSleepEndsWithContext(t *testing.T) {
	f := NewFake(time.Now())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if Sleep(ctx, f, time.Hour) {
		t.Fatal("Sleep must report false when ctx is done")
	}
}

func TestFakeAfterFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := NewFake(time.Unix(0, 0))
		var calls []time.Time
		tm := f.AfterFunc(time.Second, func() { calls = append(calls, f.Now()) })
		if tm.C() != nil {
			t.Error("an AfterFunc timer has a channel")
		}
		f.Advance(999 * time.Millisecond)
		synctest.Wait() // every goroutine the advance started has run
		if len(calls) != 0 {
			t.Fatal("called before its time")
		}
		f.Advance(time.Millisecond)
		synctest.Wait()
		if len(calls) != 1 || !calls[0].Equal(time.Unix(1, 0)) {
			t.Fatalf("calls %v, want one at 1s", calls)
		}
		// Reset arms it again; Stop before it is due keeps f from being called.
		tm.Reset(time.Second)
		if !tm.Stop() {
			t.Error("Stop of an armed timer = false")
		}
		f.Advance(time.Hour)
		synctest.Wait()
		if len(calls) != 1 {
			t.Fatalf("called after Stop: %v", calls)
		}
	})
}

package clock

import (
	"context"
	"slices"
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
	for _, c := range []Clock{Real(), NewFake(time.Unix(0, 0))} {
		for _, d := range []time.Duration{0, 1, 2, time.Millisecond, time.Second} {
			for range 200 {
				if j := Jitter(c, d); j < d/2 || j > d {
					t.Fatalf("Jitter(%T, %v) = %v, outside [d/2, d]", c, d, j)
				}
				if a := Around(c, d); a < d-d/10 || a > d+d/10 {
					t.Fatalf("Around(%T, %v) = %v, outside d ± d/10", c, d, a)
				}
			}
		}
	}
}

// A Fake's jitter is a function of its seed: two fakes with one seed draw the same, and another seed
// draws otherwise.
func TestFakeJitterIsSeeded(t *testing.T) {
	draws := func(seed uint64) []time.Duration {
		f := NewFake(time.Unix(0, 0))
		f.Seed(seed)
		out := make([]time.Duration, 20)
		for i := range out {
			out[i] = Jitter(f, time.Second)
		}
		return out
	}
	if a, b := draws(7), draws(7); !slices.Equal(a, b) {
		t.Fatalf("one seed, two sequences:\n%v\n%v", a, b)
	}
	if a, b := draws(7), draws(8); slices.Equal(a, b) {
		t.Fatalf("seeds 7 and 8 drew the same: %v", a)
	}
	if a, b := draws(0), Jitter(NewFake(time.Unix(0, 0)), time.Second); a[0] != b {
		t.Fatalf("a new Fake draws %v first, seed 0 draws %v: the default seed is not 0", b, a[0])
	}
}

// A fake ticker fires every period of fake time, drops the ticks a slow receiver missed, and follows
// Reset and Stop.
func TestFakeTicker(t *testing.T) {
	start := time.Unix(0, 0)
	f := NewFake(start)
	tk := f.NewTicker(time.Second)
	f.Advance(999 * time.Millisecond)
	select {
	case <-tk.C():
		t.Fatal("ticked early")
	default:
	}
	f.Advance(time.Millisecond)
	if got := <-tk.C(); !got.Equal(start.Add(time.Second)) {
		t.Fatalf("first tick at %v", got)
	}
	f.Advance(3500 * time.Millisecond) // past three ticks: one is delivered
	<-tk.C()
	if due, _ := f.NextDue(); !due.Equal(start.Add(5 * time.Second)) {
		t.Fatalf("next tick due %v, want 5s", due)
	}
	tk.Reset(10 * time.Second)
	if due, _ := f.NextDue(); !due.Equal(f.Now().Add(10 * time.Second)) {
		t.Fatalf("after Reset, next tick due %v, want now + 10s", due)
	}
	tk.Stop()
	if f.Timers() != 0 {
		t.Fatalf("armed after Stop: %d", f.Timers())
	}
	f.Advance(time.Hour)
	select {
	case <-tk.C():
		t.Fatal("ticked after Stop")
	default:
	}
}

func TestRealTicker(t *testing.T) {
	tk := Real().NewTicker(time.Millisecond)
	<-tk.C()
	tk.Reset(time.Millisecond)
	<-tk.C()
	tk.Stop()
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

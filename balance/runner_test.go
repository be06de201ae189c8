package balance

import (
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// restand wakes every queue only when this worker's standing against its fair share moves: not at
// each of its wins, and not at each worker that joins unless the fair share it brings moves it.
func TestRestandWakesOnlyWhenStandingMoves(t *testing.T) {
	f := newFleet(t, "a", "b", "c", "d", "w", "x", "y", "z")
	f.r.cfg.Queues = f.r.cfg.Queues[:4]                               // the others are where other workers stand
	f.member("w0", "", false).member("w1", "", false).line("z", "w1") // 4 queues on 2 workers: fair 2
	poked := func() bool {
		f.r.view.mu.Lock()
		defer f.r.view.mu.Unlock()
		all := f.r.view.all
		f.r.view.all = false
		return all
	}
	poked()
	steps := []struct {
		name string
		act  func()
		want bool
	}{
		{"1 of fair 2: below", func() { f.r.setHeld("a", true) }, true},
		{"2: at the share", func() { f.r.setHeld("b", true) }, true},
		{"3: above 2.5, within ceil's 3", func() { f.r.setHeld("c", true) }, true},
		{"4: over the limit", func() { f.r.setHeld("d", true) }, true},
		{"d won again: nothing moved", func() { f.r.setHeld("d", true) }, false},
		{"a worker joins, fair share 2 still", func() { f.line("y", "w2"); f.r.restand() }, false},
		{"d lost: 3", func() { f.r.setHeld("d", false) }, true},
		{"d lost again", func() { f.r.setHeld("d", false) }, false},
		{"two more join: fair 1, 3 is over", func() { f.line("x", "w3").line("w", "w4"); f.r.restand() }, true},
	}
	for _, s := range steps {
		s.act()
		if got := poked(); got != s.want {
			t.Fatalf("%s: every queue woken %v, want %v (standing %+v)", s.name, got, s.want, f.r.standing)
		}
	}
}

// won counts an owner change by the previous leader's hint, once per change: not a queue's first
// leader, not a term won back by this worker, and a cleared hint still tells why the queue moved.
func TestWonCountsOwnerChanges(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	f := newFleet(t, "a", "b", "c", "d")
	var err error
	if f.r.metrics, err = newBalanceMetrics(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), f.r); err != nil {
		t.Fatal(err)
	}
	f.member("w0", "", false).member("w1", "", false)
	changes := func() map[string]int64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(t.Context(), &rm); err != nil {
			t.Fatal(err)
		}
		got := map[string]int64{}
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				if m.Name != MetricOwnerChanges {
					continue
				}
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					q, _ := dp.Attributes.Value(attribute.Key("queue"))
					reason, _ := dp.Attributes.Value(attribute.Key("reason"))
					got[q.AsString()+"/"+reason.AsString()] += dp.Value
				}
			}
		}
		return got
	}
	// a: first led here, by w0.
	f.r.won(t.Context(), "a")
	// b: led by w1 (seen by mayStand), which shed it to w0.
	f.line("b", "w1")
	f.r.mayStand("b")
	f.hint("b", hint{To: "w0", From: "w1", Reason: ReasonShed})
	f.r.won(t.Context(), "b")
	f.r.won(t.Context(), "b") // the same term's bookkeeping again: w0 led it last
	// c: led by w1, which drained, and whose hint was cleared before w0's term began.
	f.line("c", "w1")
	f.r.mayStand("c")
	f.hint("c", hint{To: "w0", From: "w1", Reason: ReasonDrain})
	f.r.roster.mu.Lock()
	f.r.roster.apply(f.r.roster.hintKey("c"), nil, true)
	f.r.roster.mu.Unlock()
	f.r.won(t.Context(), "c")
	// d: never seen led, but a hint says w1 handed it over in a rollout.
	f.hint("d", hint{From: "w1", Reason: ReasonRollout})
	f.r.won(t.Context(), "d")
	want := map[string]int64{"b/" + ReasonShed: 1, "c/" + ReasonDrain: 1, "d/" + ReasonRollout: 1}
	got := changes()
	if len(got) != len(want) {
		t.Fatalf("owner changes %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("owner changes %v, want %v", got, want)
		}
	}
}

package baton

import (
	"testing"

	"github.com/baton-run/baton/registry"
)

func TestLoadReporterSendsTheIncreaseOfTheTotals(t *testing.T) {
	var now WorkerLoad
	r := loadReporter{load: func(string) WorkerLoad { return now }}
	steps := []struct {
		name  string
		now   WorkerLoad
		taken bool
		want  registry.Beat
	}{
		{"first", WorkerLoad{Active: 3, Completed: 5, Failed: 1}, true, registry.Beat{Active: 3, CompletedDelta: 5, FailedDelta: 1}},
		{"more done", WorkerLoad{Active: 2, Completed: 9, Failed: 1}, false, registry.Beat{Active: 2, CompletedDelta: 4}},
		// The previous heartbeat failed: its increase is sent again, with the new one.
		{"after a refused heartbeat", WorkerLoad{Active: 2, Completed: 10, Failed: 2}, true, registry.Beat{Active: 2, CompletedDelta: 5, FailedDelta: 1}},
		// The application reset its counters: they count from zero.
		{"counters reset", WorkerLoad{Active: 1, Completed: 2}, true, registry.Beat{Active: 1, CompletedDelta: 2}},
	}
	for _, s := range steps {
		now = s.now
		beat, load := r.beat("orders")
		if beat != s.want || load != s.now {
			t.Fatalf("%s: beat %+v (load %+v), want %+v", s.name, beat, load, s.want)
		}
		if s.taken {
			r.taken("orders", load)
		}
	}
	if beat, _ := (&loadReporter{}).beat("orders"); beat != (registry.Beat{}) {
		t.Fatalf("without Config.Load: %+v, want an empty beat", beat)
	}
}

package dispatcher

import (
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
)

// WorkerOptions sets the sticky timeout the dispatcher's workers need and keeps everything the
// application set, its own sticky timeout included.
func TestWorkerOptions(t *testing.T) {
	o := WorkerOptions(worker.Options{Identity: "w1", MaxConcurrentActivityExecutionSize: 7})
	if o.StickyScheduleToStartTimeout != DefaultStickyScheduleToStartTimeout || o.Identity != "w1" || o.MaxConcurrentActivityExecutionSize != 7 {
		t.Fatalf("WorkerOptions = %+v", o)
	}
	if o := WorkerOptions(worker.Options{StickyScheduleToStartTimeout: 3 * time.Second}); o.StickyScheduleToStartTimeout != 3*time.Second {
		t.Fatalf("the application's sticky timeout was replaced: %v", o.StickyScheduleToStartTimeout)
	}
}

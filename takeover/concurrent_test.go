package takeover

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
)

// slowDescribe is a Temporal client whose describe takes a moment and fails: it records how many
// describes were in flight at once.
type slowDescribe struct {
	Client
	now, peak atomic.Int32
}

func (c *slowDescribe) DescribeWorkflowExecution(ctx context.Context, _, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	n := c.now.Add(1)
	defer c.now.Add(-1)
	for p := c.peak.Load(); n > p && !c.peak.CompareAndSwap(p, n); p = c.peak.Load() {
	}
	select {
	case <-time.After(20 * time.Millisecond):
	case <-ctx.Done():
	}
	return nil, errors.New("unavailable")
}

// A Manager has at most MaxConcurrent takeover attempts in flight, however many queues it takes over
// at once; each of the others waits for a slot and then makes its attempt.
func TestTakeoverAttemptsAreBounded(t *testing.T) {
	c := &slowDescribe{}
	m, err := New(c, Config{MaxConcurrent: 3, MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var failed atomic.Int32
	for i := range 12 {
		wg.Go(func() {
			if _, err := m.Take(t.Context(), heldTerm{token: int64(i + 1)}); errors.Is(err, ErrFailed) {
				failed.Add(1)
			}
		})
	}
	wg.Wait()
	if p := c.peak.Load(); p != 3 {
		t.Errorf("%d attempts in flight at once, want MaxConcurrent (3)", p)
	}
	if n := failed.Load(); n != 12 {
		t.Errorf("%d of 12 takeovers made their attempt and failed", n)
	}
}

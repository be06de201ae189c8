package dispatcher

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
)

// stuckHistory answers no read: each one waits for its context, as a visibility query retried
// against a rate limit does for seconds.
type stuckHistory struct {
	HistoryReader
	reading chan struct{}
}

func (h *stuckHistory) DescribeWorkflowExecution(ctx context.Context, _, _ string) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	close(h.reading)
	<-ctx.Done()
	return nil, ctx.Err()
}

// A stopping worker does not wait for a Backlog page: the page's reads end as soon as the worker
// begins to stop, so a carry-over scan cannot hold a whole worker's graceful stop (issue #40). The
// page fails, to be read again by the run's next attempt or by its successor.
func TestBacklogEndsWhenItsWorkerStops(t *testing.T) {
	h := &stuckHistory{reading: make(chan struct{})}
	acts := &Activities{Ledger: &memLedger{}, History: h}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	stop := make(chan struct{})
	env.SetWorkerStopChannel(stop)
	env.RegisterActivityWithOptions(acts.Backlog, activity.RegisterOptions{Name: ActivityBacklog})
	done := make(chan error, 1)
	go func() {
		_, err := env.ExecuteActivity(ActivityBacklog, BacklogInput{Sources: []Source{{WorkflowID: "w", Chain: "c", Scan: true}}})
		done <- err
	}()
	<-h.reading
	close(stop)
	select {
	case err := <-done:
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Category() != temporal.ApplicationErrorCategoryBenign || app.NonRetryable() {
			t.Fatalf("Backlog = %v, want a benign, retryable failure (a stop is no error to alert on)", err)
		}
	case <-time.After(time.Minute): // generous: the fixed page ends within milliseconds
		t.Fatal("Backlog still reading a minute after its worker began to stop")
	}
}

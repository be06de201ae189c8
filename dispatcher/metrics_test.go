package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// sums returns the values of the counter name by the value of its attribute key.
func sums(t *testing.T, reader *sdkmetric.ManualReader, name, key string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
				v, _ := dp.Attributes.Value(attribute.Key(key))
				out[v.AsString()] += dp.Value
			}
		}
	}
	return out
}

// Each run of the handler is counted by its result: ok, or the type of the failure the activity
// returns for it (retryable when retrying may help).
func TestHandlerRunsCountedByResult(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	results := map[string]error{"t-ok": nil, "t-boom": errors.New("boom"), "t-gone": fmt.Errorf("app write: %w", ledger.ErrSuperseded)}
	acts := &Activities{Ledger: &fencedLedger{current: owner.Token}, MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		Handler: func(_ context.Context, _ string, r Request, _ takeover.Owner) error { return results[r.TaskID] }}
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(acts.Dispatch, activity.RegisterOptions{Name: ActivityDispatch})
	for id := range results {
		_, _ = env.ExecuteActivity(ActivityDispatch, Task{Key: req(id).Key(), Request: req(id), Owner: owner})
	}
	got := sums(t, reader, MetricHandlerRuns, "result")
	want := map[string]int64{"ok": 1, "retryable": 1, ErrTypeSuperseded: 1}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s by result = %v, want %v", MetricHandlerRuns, got, want)
	}
}

func TestProducerOutcome(t *testing.T) {
	for _, tc := range []struct {
		res  Result
		err  error
		want string
	}{
		{Result{}, nil, OutcomeHandled},
		{Result{Duplicate: true}, nil, OutcomeDuplicate},
		{Result{}, fmt.Errorf("x: %w", ErrInvalidRequest), OutcomeRejected},
		{Result{}, fmt.Errorf("x: %w (after 3 attempts)", context.DeadlineExceeded), OutcomeTimedOut},
		{Result{}, fmt.Errorf("x: %w", ErrPermanent), OutcomeFailed},
	} {
		if got := outcome(tc.res, tc.err); got != tc.want {
			t.Errorf("outcome(%+v, %v) = %s, want %s", tc.res, tc.err, got, tc.want)
		}
	}
}

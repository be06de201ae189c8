package dispatcher

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.temporal.io/sdk/temporal"
)

// Metric names of the dispatch path, each with the attributes project and queue; exported with the
// OpenTelemetry Prometheus exporter they read baton_dispatch_producer_calls_total,
// baton_dispatch_producer_latency_seconds, baton_dispatch_handler_runs_total and
// baton_dispatch_carried_over_total.
const (
	// MetricProducerCalls counts Producer.Dispatch calls by outcome: handled, duplicate (handled
	// before), rejected (ErrInvalidRequest), timed_out (ctx ended first; the request may still be
	// handled) and failed (any other error).
	MetricProducerCalls = "baton.dispatch.producer.calls"
	// MetricProducerLatency is the time a Producer.Dispatch call took, by the same outcome.
	MetricProducerLatency = "baton.dispatch.producer.latency"
	// MetricHandlerRuns counts the application handler's runs in the dispatch activity by result: ok,
	// or the failure's type (ErrTypeSuperseded, ErrTypeInvalidRequest, ... or retryable).
	MetricHandlerRuns = "baton.dispatch.handler.runs"
	// MetricCarriedOver counts the requests a run's Backlog activity carried over from earlier runs
	// (after a takeover, or from a run that continued as new with work left). Its attribute is the
	// dispatcher's workflow_id (the activity's input does not name the queue).
	MetricCarriedOver = "baton.dispatch.carried_over"
)

// The outcomes of MetricProducerCalls.
const (
	OutcomeHandled   = "handled"
	OutcomeDuplicate = "duplicate"
	OutcomeRejected  = "rejected"
	OutcomeTimedOut  = "timed_out"
	OutcomeFailed    = "failed"
)

// dispatchMetrics are the instruments of a Producer or of Activities.
type dispatchMetrics struct {
	calls       metric.Int64Counter
	latency     metric.Float64Histogram
	handlerRuns metric.Int64Counter
	carried     metric.Int64Counter
}

func newDispatchMetrics(mp metric.MeterProvider) (*dispatchMetrics, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	meter := mp.Meter("github.com/baton-run/baton/dispatcher")
	var m dispatchMetrics
	var errs [4]error
	m.calls, errs[0] = meter.Int64Counter(MetricProducerCalls,
		metric.WithDescription("Producer.Dispatch calls by outcome (handled, duplicate, rejected, timed_out, failed)."))
	m.latency, errs[1] = meter.Float64Histogram(MetricProducerLatency, metric.WithUnit("s"),
		metric.WithDescription("Time a Producer.Dispatch call took, by outcome."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	m.handlerRuns, errs[2] = meter.Int64Counter(MetricHandlerRuns,
		metric.WithDescription("Runs of the application's dispatch handler, by result (ok or the failure's type)."))
	m.carried, errs[3] = meter.Int64Counter(MetricCarriedOver,
		metric.WithDescription("Requests carried over from earlier runs by Backlog activities."))
	if err := errors.Join(errs[:]...); err != nil {
		return nil, err
	}
	return &m, nil
}

func queueAttrs(project, queue string, more ...attribute.KeyValue) metric.MeasurementOption {
	return metric.WithAttributes(append([]attribute.KeyValue{attribute.String("project", project), attribute.String("queue", queue)}, more...)...)
}

// call records one Producer.Dispatch call.
func (m *dispatchMetrics) call(ctx context.Context, project, queue, outcome string, took time.Duration) {
	ctx = context.WithoutCancel(ctx) // a call that timed out is recorded all the same
	attrs := queueAttrs(project, queue, attribute.String("outcome", outcome))
	m.calls.Add(ctx, 1, attrs)
	m.latency.Record(ctx, took.Seconds(), attrs)
}

// handlerRun records one run of the application's handler; err is what the activity returns for it.
func (m *dispatchMetrics) handlerRun(ctx context.Context, project, queue string, err error) {
	result := "ok"
	if err != nil {
		result = "retryable"
		var app *temporal.ApplicationError
		if errors.As(err, &app) && app.NonRetryable() {
			result = app.Type()
		}
	}
	m.handlerRuns.Add(context.WithoutCancel(ctx), 1, queueAttrs(project, queue, attribute.String("result", result)))
}

// lazyMetrics builds an Activities' instruments once, from its MeterProvider.
type lazyMetrics struct {
	once sync.Once
	m    *dispatchMetrics
}

func (l *lazyMetrics) get(mp metric.MeterProvider) *dispatchMetrics {
	l.once.Do(func() {
		var err error
		if l.m, err = newDispatchMetrics(mp); err != nil {
			l.m, _ = newDispatchMetrics(nil) // an instrument the provider refuses is not worth a failed dispatch
		}
	})
	return l.m
}

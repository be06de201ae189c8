package takeover

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names, each with the attributes project and queue; exported with the OpenTelemetry Prometheus exporter they read
// baton_takeover_total, baton_takeover_latency_seconds, baton_takeover_terminations_total,
// baton_takeover_regressions_total and baton_takeover_run_closes_total.
const (
	MetricTakeovers    = "baton.takeover"
	MetricLatency      = "baton.takeover.latency"
	MetricTerminations = "baton.takeover.terminations"
	// MetricRegressions counts open runs that carried a higher token than a term etcd confirmed: etcd's
	// revisions went back (a restore without --bump-revision, a new cluster). Each was replaced.
	MetricRegressions = "baton.takeover.regressions"
	// MetricRunCloses counts closes of an owner's run that Watch saw during the term, by status
	// (continued_as_new is followed; the others are replaced or end the term).
	MetricRunCloses = "baton.takeover.run_closes"
)

type metrics struct {
	takeovers    metric.Int64Counter
	latencies    metric.Float64Histogram
	terminations metric.Int64Counter
	regressions  metric.Int64Counter
	closes       metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider) (*metrics, error) {
	meter := mp.Meter("github.com/baton-run/baton/takeover")
	takeovers, err := meter.Int64Counter(MetricTakeovers,
		metric.WithDescription("Dispatcher takeovers by outcome (started, superseded, failed, invalid) and path."))
	if err != nil {
		return nil, err
	}
	latencies, err := meter.Float64Histogram(MetricLatency, metric.WithUnit("s"),
		metric.WithDescription("Time from winning the election to the new dispatcher run being open."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	if err != nil {
		return nil, err
	}
	terminations, err := meter.Int64Counter(MetricTerminations,
		metric.WithDescription("Dispatcher runs terminated by run ID during takeover and step-down, by result."))
	if err != nil {
		return nil, err
	}
	regressions, err := meter.Int64Counter(MetricRegressions,
		metric.WithDescription("Open dispatcher runs with a higher token than the confirmed term (etcd history went back); each was replaced."))
	if err != nil {
		return nil, err
	}
	closes, err := meter.Int64Counter(MetricRunCloses,
		metric.WithDescription("Closes of the owner's dispatcher run seen during its term, by status."))
	if err != nil {
		return nil, err
	}
	return &metrics{takeovers: takeovers, latencies: latencies, terminations: terminations, regressions: regressions,
		closes: closes}, nil
}

func queueAttrs(project, queue string) []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("project", project), attribute.String("queue", queue)}
}

func (m *metrics) takeover(ctx context.Context, project, queue, outcome string, path Path) {
	m.takeovers.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(append(queueAttrs(project, queue),
		attribute.String("outcome", outcome), attribute.String("path", string(path)))...))
}

func (m *metrics) latency(ctx context.Context, project, queue string, d time.Duration, path Path) {
	m.latencies.Record(context.WithoutCancel(ctx), d.Seconds(), metric.WithAttributes(append(queueAttrs(project, queue),
		attribute.String("path", string(path)))...))
}

func (m *metrics) terminated(ctx context.Context, project, queue, result string) {
	m.terminations.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(append(queueAttrs(project, queue),
		attribute.String("result", result))...))
}

func (m *metrics) regression(ctx context.Context, project, queue string) {
	m.regressions.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(queueAttrs(project, queue)...))
}

func (m *metrics) closed(ctx context.Context, project, queue, status string) {
	m.closes.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(append(queueAttrs(project, queue),
		attribute.String("status", status))...))
}

package registry

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names. With the OpenTelemetry Prometheus exporter they read baton_registry_evictions_total,
// baton_registry_heartbeats_total and baton_registry_malformed_total.
const (
	MetricEvictions  = "baton.registry.evictions"
	MetricHeartbeats = "baton.registry.heartbeats"
	MetricMalformed  = "baton.registry.malformed"
)

type metrics struct {
	project    attribute.KeyValue
	evictions  metric.Int64Counter
	heartbeats metric.Int64Counter
	malformed  metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider, project string) (*metrics, error) {
	meter := mp.Meter("github.com/baton-run/baton/registry")
	m := &metrics{project: attribute.String("project", project)}
	var err error
	if m.evictions, err = meter.Int64Counter(MetricEvictions,
		metric.WithDescription("Workers evicted by their queue's leader for a heartbeat older than the threshold, by queue.")); err != nil {
		return nil, err
	}
	if m.heartbeats, err = meter.Int64Counter(MetricHeartbeats,
		metric.WithDescription("Worker heartbeats by result (ok, not_registered, invalid, error).")); err != nil {
		return nil, err
	}
	if m.malformed, err = meter.Int64Counter(MetricMalformed,
		metric.WithDescription("Malformed registry records, index entries and keys met (skipped or replaced), by operation.")); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) evicted(ctx context.Context, queue string, n int) {
	m.evictions.Add(context.WithoutCancel(ctx), int64(n), metric.WithAttributes(m.project, attribute.String("queue", queue)))
}

func (m *metrics) heartbeat(ctx context.Context, result string) {
	m.heartbeats.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(m.project, attribute.String("result", result)))
}

func (m *metrics) malformedSeen(ctx context.Context, op string, n int) {
	m.malformed.Add(context.WithoutCancel(ctx), int64(n), metric.WithAttributes(m.project, attribute.String("op", op)))
}

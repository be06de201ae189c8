package reconciler

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metric names: the PRD's dispatcher.active, dispatcher.stale, ... under Baton's prefix, like every
// other Baton series. With the OpenTelemetry Prometheus exporter they read baton_dispatcher_active,
// baton_dispatcher_stale, baton_dispatcher_terminations_total, baton_dispatcher_cleanup_errors_total,
// baton_reconcile_cycle_duration_seconds and baton_reconcile_cycles_total.
const (
	MetricActive        = "baton.dispatcher.active"
	MetricStale         = "baton.dispatcher.stale"
	MetricTerminations  = "baton.dispatcher.terminations"
	MetricCleanupErrors = "baton.dispatcher.cleanup_errors"
	MetricCycleDuration = "baton.reconcile.cycle.duration"
	MetricCycles        = "baton.reconcile.cycles"
	// MetricLastSuccessAge is the time since this process's last successful cycle (since its reconciler
	// started, before the first), reported by every process that runs a reconciler: the project's
	// minimum over processes says how long cleanup has been silent.
	MetricLastSuccessAge = "baton.reconcile.last_success.age"
	// MetricOrphans counts the dispatcher runs the reconciler leader ended outside its cycle, when a
	// queue stayed without any candidate for OrphanGrace after its owner's key went (Config.OrphanGrace).
	MetricOrphans = "baton.dispatcher.orphans"
)

type metrics struct {
	project       attribute.KeyValue
	leading       atomic.Bool  // only the reconciler leader reports the gauges
	active, stale atomic.Int64 // as of the last successful cycle
	lastSuccess   atomic.Int64 // Unix nanoseconds of the last successful cycle, or of the start
	terminations  metric.Int64Counter
	cleanupErrors metric.Int64Counter
	duration      metric.Float64Histogram
	cycles        metric.Int64Counter
	orphans       metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider, project string, now func() time.Time) (*metrics, error) {
	meter := mp.Meter("github.com/baton-run/baton/reconciler")
	m := &metrics{project: attribute.String("project", project)}
	m.lastSuccess.Store(now().UnixNano())
	var err error
	_, err = meter.Float64ObservableGauge(MetricLastSuccessAge, metric.WithUnit("s"),
		metric.WithDescription("Seconds since this process's last successful reconcile cycle (since its reconciler started, before the first)."),
		metric.WithFloat64Callback(func(_ context.Context, o metric.Float64Observer) error {
			o.Observe(now().Sub(time.Unix(0, m.lastSuccess.Load())).Seconds(), metric.WithAttributes(m.project))
			return nil
		}))
	if err != nil {
		return nil, err
	}
	active, err := meter.Int64ObservableGauge(MetricActive,
		metric.WithDescription("Dispatcher heartbeats of the project that were fresh at the last reconcile cycle; reported by the reconciler leader only."))
	if err != nil {
		return nil, err
	}
	stale, err := meter.Int64ObservableGauge(MetricStale,
		metric.WithDescription("Dispatcher heartbeats of the project that were stale at the last reconcile cycle; reported by the reconciler leader only."))
	if err != nil {
		return nil, err
	}
	if _, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if m.leading.Load() {
			o.ObserveInt64(active, m.active.Load(), metric.WithAttributes(m.project))
			o.ObserveInt64(stale, m.stale.Load(), metric.WithAttributes(m.project))
		}
		return nil
	}, active, stale); err != nil {
		return nil, err
	}
	if m.terminations, err = meter.Int64Counter(MetricTerminations,
		metric.WithDescription("Stale dispatcher runs terminated by the reconciler, by result (terminated, already_closed).")); err != nil {
		return nil, err
	}
	if m.cleanupErrors, err = meter.Int64Counter(MetricCleanupErrors,
		metric.WithDescription("Stale dispatcher cleanup failures, by kind (malformed, leader_lookup, terminate, delete).")); err != nil {
		return nil, err
	}
	if m.duration, err = meter.Float64Histogram(MetricCycleDuration, metric.WithUnit("s"),
		metric.WithDescription("Duration of reconcile cycles."),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		return nil, err
	}
	if m.cycles, err = meter.Int64Counter(MetricCycles,
		metric.WithDescription("Reconcile cycles by result (ok, error, not_leader).")); err != nil {
		return nil, err
	}
	if m.orphans, err = meter.Int64Counter(MetricOrphans,
		metric.WithDescription("Dispatcher runs of crashed owners with no successor ended by the reconciler leader as soon as their queue stayed without a candidate for the orphan grace.")); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) orphan(ctx context.Context) {
	m.orphans.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(m.project))
}

func (m *metrics) terminated(ctx context.Context, result string) {
	m.terminations.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(m.project, attribute.String("result", result)))
}

func (m *metrics) cleanupError(ctx context.Context, kind string) {
	m.cleanupErrors.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(m.project, attribute.String("kind", kind)))
}

func (m *metrics) cycle(ctx context.Context, rep Report, result string) {
	ctx = context.WithoutCancel(ctx)
	if result == "ok" {
		m.active.Store(int64(rep.Active))
		m.stale.Store(int64(rep.Stale))
	}
	m.duration.Record(ctx, rep.Duration.Seconds(), metric.WithAttributes(m.project))
	m.cycles.Add(ctx, 1, metric.WithAttributes(m.project, attribute.String("result", result)))
}

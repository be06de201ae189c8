package baton

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/progress"
)

// Metric names of a Node. With the OpenTelemetry Prometheus exporter they read baton_queue_leader,
// baton_queue_dispatcher_open and baton_stepdowns_total.
const (
	// MetricLeader is 1 for each queue this process leads, 0 otherwise (attributes project, queue).
	// Summed over processes it is the number of leaders per queue: 1 when healthy.
	MetricLeader = "baton.queue.leader"
	// MetricDispatcherOpen is 1 for each queue whose dispatcher run this process started and still
	// owns, open as far as its supervision knows (attributes project, queue): 0 while it leads the
	// queue without an open run.
	MetricDispatcherOpen = "baton.queue.dispatcher.open"
	// MetricStepDowns counts ended terms by cause (election.EndReason: resigned, session_lost,
	// key_lost, closed, other).
	MetricStepDowns = "baton.stepdowns"
	// MetricWorkers is the number of the queue's registered workers by status (ONLINE, DRAINING,
	// OFFLINE), reported by the queue's leader only, as of its last eviction pass.
	MetricWorkers = "baton.registry.workers"
	// MetricDispatchStalled is, for each queue this process leads and each progress.Cause, 1 while
	// the last progress check of its run found that cause, else 0 (attributes project, queue, cause).
	MetricDispatchStalled = "baton.dispatch.stalled"
	// MetricDispatchPending is the number of requests the run holds (accepted, not yet handled:
	// waiting or in flight), by the queue's owner, as of its last progress check.
	MetricDispatchPending = "baton.dispatch.pending"
	// MetricDispatchOldestPending is how long the oldest request the run holds has waited, in
	// seconds (0: none), as of the owner's last progress check.
	MetricDispatchOldestPending = "baton.dispatch.oldest_pending.age"
	// MetricDispatchBacklog is the number of earlier runs whose requests the queue's run has still to
	// read back (the carry-over after a takeover), as of the owner's last progress check.
	MetricDispatchBacklog = "baton.dispatch.backlog"
	// MetricContinuedAsNew counts the dispatcher runs that continued as new under this process's
	// supervision (attributes project, queue).
	MetricContinuedAsNew = "baton.dispatch.continued_as_new"
	// MetricRunsFailing is, for each queue this process leads or led a moment ago, the number of its
	// dispatcher runs in a row that closed FAILED or TIMED_OUT within ownership.RunFailingWithin of
	// their start, while readiness fails with ErrRunsFailing (ownership.Snapshot.RunsFailing), else 0
	// (attributes project, queue): the start code or the first workflow task fails every time.
	MetricRunsFailing = "baton.dispatch.runs_failing"
)

type metrics struct {
	project   attribute.KeyValue
	stepDowns metric.Int64Counter
	continued metric.Int64Counter
}

func newMetrics(mp metric.MeterProvider, n *Node) (*metrics, error) {
	meter := mp.Meter("github.com/baton-run/baton")
	m := &metrics{project: attribute.String("project", n.cfg.Project)}
	var err error
	if m.stepDowns, err = meter.Int64Counter(MetricStepDowns,
		metric.WithDescription("Queue leadership terms ended, by cause (resigned, session_lost, key_lost, closed, other).")); err != nil {
		return nil, err
	}
	if m.continued, err = meter.Int64Counter(MetricContinuedAsNew,
		metric.WithDescription("Dispatcher runs that continued as new while this process owned them.")); err != nil {
		return nil, err
	}
	leader, err := meter.Int64ObservableGauge(MetricLeader,
		metric.WithDescription("1 for each queue this process leads, else 0; summed over processes, the leaders per queue."))
	if err != nil {
		return nil, err
	}
	open, err := meter.Int64ObservableGauge(MetricDispatcherOpen,
		metric.WithDescription("1 for each queue whose dispatcher run this process started and owns, else 0."))
	if err != nil {
		return nil, err
	}
	workers, err := meter.Int64ObservableGauge(MetricWorkers,
		metric.WithDescription("Registered workers of the queue by status, reported by the queue's leader."))
	if err != nil {
		return nil, err
	}
	stalled, err := meter.Int64ObservableGauge(MetricDispatchStalled,
		metric.WithDescription("1 while the owner's last progress check of the queue's dispatcher run found this cause, else 0."))
	if err != nil {
		return nil, err
	}
	pending, err := meter.Int64ObservableGauge(MetricDispatchPending,
		metric.WithDescription("Requests the queue's dispatcher run holds (waiting or in flight), by its owner's last progress check."))
	if err != nil {
		return nil, err
	}
	oldest, err := meter.Float64ObservableGauge(MetricDispatchOldestPending, metric.WithUnit("s"),
		metric.WithDescription("How long the oldest request the queue's dispatcher run holds has waited, by its owner's last progress check."))
	if err != nil {
		return nil, err
	}
	backlog, err := meter.Int64ObservableGauge(MetricDispatchBacklog,
		metric.WithDescription("Earlier runs whose requests the queue's dispatcher run has still to read back, by its owner's last progress check."))
	if err != nil {
		return nil, err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		for q, own := range n.owned {
			s := own.Snapshot()
			attrs := metric.WithAttributes(m.project, attribute.String("queue", q))
			var leading, owned int64
			if s.Leading {
				leading = 1
				if s.Open {
					owned = 1
				}
			}
			o.ObserveInt64(leader, leading, attrs)
			o.ObserveInt64(open, owned, attrs)
			if s.Leading && !s.Progress.CheckedAt.IsZero() {
				observeProgress(o, m.project, q, s.Progress, progressGauges{stalled, pending, oldest, backlog})
			}
			if s.Leading {
				for status, count := range s.Workers {
					o.ObserveInt64(workers, int64(count), metric.WithAttributes(m.project, attribute.String("queue", q),
						attribute.String("status", string(status))))
				}
			}
		}
		return nil
	}, leader, open, workers, stalled, pending, oldest, backlog)
	if err != nil {
		return nil, err
	}
	if err := registerRunsFailing(meter, n, m.project); err != nil {
		return nil, err
	}
	return m, nil
}

// registerRunsFailing reports MetricRunsFailing for every queue of n.
func registerRunsFailing(meter metric.Meter, n *Node, project attribute.KeyValue) error {
	failing, err := meter.Int64ObservableGauge(MetricRunsFailing,
		metric.WithDescription("Dispatcher runs in a row that closed failed within a minute of their start, while the queue's readiness fails for it; else 0."))
	if err != nil {
		return err
	}
	_, err = meter.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		now := n.cfg.Clock.Now()
		for q, own := range n.owned {
			s := own.Snapshot()
			var v int64
			if s.RunsFailing(now) {
				v = int64(s.QuickCloses)
			}
			o.ObserveInt64(failing, v, metric.WithAttributes(project, attribute.String("queue", q)))
		}
		return nil
	}, failing)
	return err
}

// progressGauges are the instruments of a queue's last progress check.
type progressGauges struct {
	stalled, pending metric.Int64Observable
	oldest           metric.Float64Observable
	backlog          metric.Int64Observable
}

// observeProgress reports a leading queue's last progress check.
func observeProgress(o metric.Observer, project attribute.KeyValue, queue string, rep progress.Report, g progressGauges) {
	q := attribute.String("queue", queue)
	for _, c := range progress.Causes {
		var v int64
		if rep.Cause == c {
			v = 1
		}
		o.ObserveInt64(g.stalled, v, metric.WithAttributes(project, q, attribute.String("cause", string(c))))
	}
	attrs := metric.WithAttributes(project, q)
	switch p := rep.Progress; {
	case p != nil:
		o.ObserveInt64(g.pending, int64(p.Waiting+p.InFlight), attrs)
		o.ObserveFloat64(g.oldest, rep.OldestPendingAge.Seconds(), attrs)
		o.ObserveInt64(g.backlog, int64(p.Backlog), attrs)
	case !rep.Stalled():
		// Not asked because the run is idle (no workflow task, no dispatch in flight): it holds nothing.
		o.ObserveInt64(g.pending, 0, attrs)
		o.ObserveFloat64(g.oldest, 0, attrs)
		o.ObserveInt64(g.backlog, 0, attrs)
	}
}

// continuedAsNew counts one run of queue that continued as new.
func (m *metrics) continuedAsNew(ctx context.Context, queue string) {
	m.continued.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(m.project, attribute.String("queue", queue)))
}

func (m *metrics) stepDown(ctx context.Context, queue string, cause error) {
	m.stepDowns.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(m.project,
		attribute.String("queue", queue), attribute.String("cause", election.EndReason(cause))))
}

package registry_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/registry"
)

const project = "billing"

// env is one test's real redis-server and a registry over it.
type env struct {
	srv    *redisx.Server
	rdb    *redis.Client
	reg    *registry.Registry
	reader *sdkmetric.ManualReader
}

func newEnv(t *testing.T, cfg registry.Config) *env {
	t.Helper()
	srv := redisx.Start(t, redisx.Options{})
	e := &env{srv: srv, rdb: redisx.Client(t, srv), reader: sdkmetric.NewManualReader()}
	e.reg = e.registry(t, e.rdb, cfg)
	return e
}

// registry returns a registry over rdb with the test's prefix, logger and meter provider.
func (e *env) registry(t *testing.T, rdb redis.UniversalClient, cfg registry.Config) *registry.Registry {
	t.Helper()
	if cfg.Project == "" {
		cfg.Project = project
	}
	if cfg.Prefix == "" {
		cfg.Prefix = redisx.Prefix(t)
	}
	cfg.Logger = zaptest.NewLogger(t)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.WithoutCancel(t.Context())) })
	cfg.MeterProvider = mp
	reg, err := registry.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return reg
}

func worker(queue, id string) registry.Registration {
	return registry.Registration{
		ServerID: id, Queue: queue, Hostname: "host-" + id, PID: 1000, Version: "1.0.0",
		Capabilities: []string{"ChargeCard", "RefundCard"}, Labels: map[string]string{"zone": "a"},
		MaxConcurrency: 8,
	}
}

func (e *env) register(t *testing.T, reg registry.Registration) registry.Worker {
	t.Helper()
	w, err := e.reg.Register(t.Context(), reg)
	if err != nil {
		t.Fatalf("register %s/%s: %v", reg.Queue, reg.ServerID, err)
	}
	return w
}

func (e *env) get(t *testing.T, queue, id string) registry.Worker {
	t.Helper()
	w, err := e.reg.Get(t.Context(), queue, id)
	if err != nil {
		t.Fatalf("get %s/%s: %v", queue, id, err)
	}
	return w
}

// redisNow returns the Redis server's time.
func (e *env) redisNow(t *testing.T) time.Time {
	t.Helper()
	now, err := e.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// counter sums the data points of an Int64 counter whose attributes include every want pair.
func (e *env) counter(t *testing.T, name string, want map[string]string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			data, ok := m.Data.(metricdata.Sum[int64])
			if !ok {
				t.Fatalf("%s is %T, not an int64 sum", name, m.Data)
			}
		point:
			for _, dp := range data.DataPoints {
				for k, v := range want {
					if got, ok := dp.Attributes.Value(attribute.Key(k)); !ok || got.AsString() != v {
						continue point
					}
				}
				sum += dp.Value
			}
		}
	}
	return sum
}

func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	harness.Eventually(t, d, what, f)
}

// fakeTerm is a term whose fencing token and liveness the test sets; for tests that are not about
// etcd itself.
type fakeTerm struct {
	token int64
	ended atomic.Bool
}

func (f *fakeTerm) Token() int64 { return f.token }
func (f *fakeTerm) Check() error {
	if f.ended.Load() {
		return errors.New("fake term ended")
	}
	return nil
}

// heartbeater heartbeats one worker every interval until stopped; the test owns its goroutine.
type heartbeater struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	errs   []error
	beats  atomic.Int64
}

func (e *env) heartbeat(t *testing.T, queue, id string, interval time.Duration) *heartbeater {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	h := &heartbeater{cancel: cancel}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			_, err := e.reg.Heartbeat(ctx, queue, id, registry.Beat{Active: 1, CompletedDelta: 1})
			if err != nil && ctx.Err() == nil {
				h.mu.Lock()
				h.errs = append(h.errs, fmt.Errorf("%s/%s: %w", queue, id, err))
				h.mu.Unlock()
			} else if err == nil {
				h.beats.Add(1)
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(h.stop)
	return h
}

// stop ends the loop and waits for it; it returns the errors the loop met.
func (h *heartbeater) stop() {
	h.cancel()
	h.wg.Wait()
}

func (h *heartbeater) errors() []error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]error(nil), h.errs...)
}

// waitStale waits until the heartbeat of (queue, id) is older than d by Redis time.
func (e *env) waitStale(t *testing.T, queue, id string, d time.Duration) {
	t.Helper()
	eventually(t, 30*time.Second, queue+"/"+id+" stale", func() error {
		score, err := e.rdb.ZScore(t.Context(), e.reg.HeartbeatKey(queue), id).Result()
		if err != nil {
			return err
		}
		age := e.redisNow(t).Sub(time.UnixMilli(int64(score)))
		if age <= d+10*time.Millisecond {
			return fmt.Errorf("age %v", age)
		}
		return nil
	})
}

func zmember(m string) redis.Z                { return redis.Z{Score: 0, Member: m} }
func zscored(score float64, m string) redis.Z { return redis.Z{Score: score, Member: m} }

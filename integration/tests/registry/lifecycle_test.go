package registry_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/registry"
)

func TestLifecycle(t *testing.T) {
	e := newEnv(t, registry.Config{HeartbeatInterval: 200 * time.Millisecond, Retention: time.Second})
	ctx := t.Context()
	const q, id = "orders", "worker-1"

	before := e.redisNow(t)
	w := e.register(t, worker(q, id))
	after := e.redisNow(t)
	if w.Status != registry.StatusOnline || w.RegisteredAt.Before(before.Truncate(time.Millisecond)) || w.RegisteredAt.After(after) {
		t.Fatalf("registered %+v, Redis time between %v and %v", w, before, after)
	}
	got := e.get(t, q, id)
	if got.Status != registry.StatusOnline || got.Hostname != "host-"+id || got.PID != 1000 || got.Version != "1.0.0" ||
		!slices.Equal(got.Capabilities, []string{"ChargeCard", "RefundCard"}) || got.Labels["zone"] != "a" ||
		got.MaxConcurrency != 8 || !got.RegisteredAt.Equal(w.RegisteredAt) || !got.LastHeartbeat.Equal(w.RegisteredAt) {
		t.Fatalf("Get after Register: %+v", got)
	}

	// Heartbeats accumulate the deltas and are stamped with Redis time.
	beats := []registry.Beat{{Active: 2, CompletedDelta: 5}, {Active: 4, CompletedDelta: 7, FailedDelta: 1}, {Active: 1}}
	var last time.Time
	for _, b := range beats {
		before := e.redisNow(t)
		st, err := e.reg.Heartbeat(ctx, q, id, b)
		if err != nil || st != registry.StatusOnline {
			t.Fatalf("heartbeat: %v %v", st, err)
		}
		got := e.get(t, q, id)
		if got.LastHeartbeat.Before(before.Truncate(time.Millisecond)) || got.LastHeartbeat.Before(last) {
			t.Fatalf("last heartbeat %v, Redis time before the call %v, previous %v", got.LastHeartbeat, before, last)
		}
		last = got.LastHeartbeat
	}
	got = e.get(t, q, id)
	if got.Active != 1 || got.TotalCompleted != 12 || got.TotalFailed != 1 {
		t.Fatalf("after heartbeats: active %d completed %d failed %d", got.Active, got.TotalCompleted, got.TotalFailed)
	}
	if score, err := e.rdb.ZScore(ctx, e.reg.HeartbeatKey(q), id).Result(); err != nil || int64(score) != got.LastHeartbeat.UnixMilli() {
		t.Fatalf("heartbeat set score %v (%v), record %v", score, err, got.LastHeartbeat.UnixMilli())
	}

	// Drain is learned from the next heartbeat's answer.
	if err := e.reg.Drain(ctx, q, id); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Drain(ctx, q, id); err != nil {
		t.Fatalf("draining twice: %v", err)
	}
	if st, err := e.reg.Heartbeat(ctx, q, id, registry.Beat{Active: 1, CompletedDelta: 1}); err != nil || st != registry.StatusDraining {
		t.Fatalf("heartbeat after drain: %v %v", st, err)
	}
	if got := e.get(t, q, id); got.Status != registry.StatusDraining || got.TotalCompleted != 13 {
		t.Fatalf("after drain: %+v", got)
	}
	// Undrain takes it back, learned the same way; undraining twice changes nothing; then drain again.
	for range 2 {
		if err := e.reg.Undrain(ctx, q, id); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := e.reg.Heartbeat(ctx, q, id, registry.Beat{Active: 1}); err != nil || st != registry.StatusOnline {
		t.Fatalf("heartbeat after undrain: %v %v", st, err)
	}
	if err := e.reg.Drain(ctx, q, id); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Undrain(ctx, q, "nobody"); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("undrain of an unknown worker: %v", err)
	}

	// Deregister: OFFLINE, out of the heartbeat set, refused heartbeats, kept for Retention.
	if err := e.reg.Deregister(ctx, q, id); err != nil {
		t.Fatal(err)
	}
	off := e.get(t, q, id)
	if off.Status != registry.StatusOffline || off.DeregisteredAt.IsZero() || off.DeregisteredAt.Before(off.LastHeartbeat) || off.EvictedBy != 0 {
		t.Fatalf("after deregister: %+v", off)
	}
	if n, _ := e.rdb.ZCard(ctx, e.reg.HeartbeatKey(q)).Result(); n != 0 {
		t.Fatalf("heartbeat set still holds %d entries", n)
	}
	if ttl, err := e.rdb.PTTL(ctx, e.reg.WorkerKey(q, id)).Result(); err != nil || ttl <= 0 || ttl > time.Second {
		t.Fatalf("record TTL %v %v, want (0, 1s]", ttl, err)
	}
	st, err := e.reg.Heartbeat(ctx, q, id, registry.Beat{})
	if !errors.Is(err, registry.ErrNotRegistered) || st != registry.StatusOffline {
		t.Fatalf("heartbeat after deregister: %v %v", st, err)
	}
	if err := e.reg.Drain(ctx, q, id); !errors.Is(err, registry.ErrOffline) {
		t.Fatalf("drain after deregister: %v", err)
	}
	if err := e.reg.Undrain(ctx, q, id); !errors.Is(err, registry.ErrOffline) {
		t.Fatalf("undrain after deregister: %v", err)
	}
	if err := e.reg.Deregister(ctx, q, id); err != nil {
		t.Fatalf("deregistering twice: %v", err)
	}
	if again := e.get(t, q, id); !again.DeregisteredAt.Equal(off.DeregisteredAt) {
		t.Fatalf("a second deregister moved DeregisteredAt from %v to %v", off.DeregisteredAt, again.DeregisteredAt)
	}
	if c := e.counter(t, registry.MetricHeartbeats, map[string]string{"project": project, "result": "not_registered"}); c != 1 {
		t.Fatalf("not_registered heartbeats counted %d, want 1", c)
	}

	// After Retention the record disappears.
	eventually(t, 15*time.Second, "record expired", func() error {
		_, err := e.reg.Get(ctx, q, id)
		if errors.Is(err, registry.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("Get = %v", err)
	})
	if _, err := e.reg.Heartbeat(ctx, q, id, registry.Beat{}); !errors.Is(err, registry.ErrNotRegistered) {
		t.Fatalf("heartbeat after expiry: %v", err)
	}
	if err := e.reg.Drain(ctx, q, id); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("drain after expiry: %v", err)
	}
	if err := e.reg.Deregister(ctx, q, id); !errors.Is(err, registry.ErrNotFound) {
		t.Fatalf("deregister after expiry: %v", err)
	}

	// Registering again starts a fresh ONLINE record.
	w2 := e.register(t, worker(q, id))
	if got := e.get(t, q, id); got.Status != registry.StatusOnline || got.TotalCompleted != 0 || !got.DeregisteredAt.IsZero() ||
		!got.RegisteredAt.Equal(w2.RegisteredAt) {
		t.Fatalf("re-registered: %+v", got)
	}
	if st, err := e.reg.Heartbeat(ctx, q, id, registry.Beat{CompletedDelta: 3}); err != nil || st != registry.StatusOnline {
		t.Fatalf("heartbeat after re-register: %v %v", st, err)
	}
}

func TestReRegisterReplacesTheRecord(t *testing.T) {
	e := newEnv(t, registry.Config{})
	ctx := t.Context()
	e.register(t, worker("orders", "w"))
	if _, err := e.reg.Heartbeat(ctx, "orders", "w", registry.Beat{Active: 3, CompletedDelta: 9}); err != nil {
		t.Fatal(err)
	}
	if err := e.reg.Drain(ctx, "orders", "w"); err != nil {
		t.Fatal(err)
	}
	again := worker("orders", "w")
	again.PID, again.Version, again.Capabilities, again.Labels = 2000, "2.0.0", []string{"Refund"}, nil
	e.register(t, again)
	got := e.get(t, "orders", "w")
	if got.Status != registry.StatusOnline || got.PID != 2000 || got.Version != "2.0.0" || got.TotalCompleted != 0 ||
		got.Active != 0 || !slices.Equal(got.Capabilities, []string{"Refund"}) || len(got.Labels) != 0 {
		t.Fatalf("re-registered record: %+v", got)
	}
	// The same server ID on another queue is another worker.
	e.register(t, worker("payments", "w"))
	if got := e.get(t, "orders", "w"); got.PID != 2000 {
		t.Fatalf("registering on another queue touched orders/w: %+v", got)
	}
}

func TestRegistrationRefused(t *testing.T) {
	e := newEnv(t, registry.Config{})
	cases := []struct {
		name   string
		modify func(r *registry.Registration)
		want   string
	}{
		{"no capabilities", func(r *registry.Registration) { r.Capabilities = nil }, "Capabilities must list at least one capability"},
		{"server ID with slash", func(r *registry.Registration) { r.ServerID = "a/b" }, `ServerID "a/b" must not contain '/'`},
		{"queue with space", func(r *registry.Registration) { r.Queue = "a b" }, `Queue "a b" must not contain white space`},
		{"no pid", func(r *registry.Registration) { r.PID = 0 }, "PID must be positive"},
		{"zero concurrency", func(r *registry.Registration) { r.MaxConcurrency = 0 }, "MaxConcurrency must be at least 1"},
		{"blank capability", func(r *registry.Registration) { r.Capabilities = []string{""} }, "Capabilities[0] must not be empty"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := worker("orders", "w-refused")
			tc.modify(&r)
			_, err := e.reg.Register(t.Context(), r)
			if !errors.Is(err, registry.ErrInvalidRegistration) || !containsAll(err.Error(), "registry: invalid registration", tc.want) {
				t.Fatalf("Register = %v, want ErrInvalidRegistration naming %q", err, tc.want)
			}
		})
	}
	if keys, err := e.rdb.Keys(t.Context(), e.reg.Config().Prefix+"*").Result(); err != nil || len(keys) != 0 {
		t.Fatalf("refused registrations wrote keys %v (%v)", keys, err)
	}
	// The other calls refuse invalid names too, before touching Redis.
	if _, err := e.reg.Heartbeat(t.Context(), "orders", "", registry.Beat{}); !errors.Is(err, registry.ErrInvalidArgument) {
		t.Fatalf("heartbeat with empty server ID: %v", err)
	}
	if _, err := e.reg.Heartbeat(t.Context(), "orders", "w", registry.Beat{Active: -1}); !errors.Is(err, registry.ErrInvalidArgument) {
		t.Fatalf("heartbeat with negative active count: %v", err)
	}
	if _, err := e.reg.Get(t.Context(), "a/b", "w"); !errors.Is(err, registry.ErrInvalidArgument) {
		t.Fatalf("get with invalid queue: %v", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

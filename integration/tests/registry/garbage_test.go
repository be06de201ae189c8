package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/registry"
)

// TestGarbageTolerated writes values this package never writes, with raw Redis commands, and checks
// that nothing panics or stops: Get names the key and the field, List skips, Evict still evicts the
// dead, heartbeats repair what they own.
func TestGarbageTolerated(t *testing.T) {
	// good-1 heartbeats right before Evict and must survive it: EvictAfter is the margin between the
	// two calls that a loaded machine must not use up.
	e := newEnv(t, registry.Config{HeartbeatInterval: 100 * time.Millisecond, EvictAfter: 2 * time.Second})
	ctx := t.Context()
	const q = "orders"
	for _, id := range []string{"good-1", "good-2", "bad-counter", "bad-status", "bad-caps", "bad-labels", "bad-pid", "wrong-type"} {
		e.register(t, worker(q, id))
	}
	raw := e.rdb
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(raw.HSet(ctx, e.reg.WorkerKey(q, "bad-counter"), registry.FieldTotalCompleted, "lots").Err())
	must(raw.HSet(ctx, e.reg.WorkerKey(q, "bad-status"), registry.FieldStatus, "ZOMBIE").Err())
	must(raw.HSet(ctx, e.reg.WorkerKey(q, "bad-caps"), registry.FieldCapabilities, `["ChargeCard",`).Err())
	must(raw.HSet(ctx, e.reg.WorkerKey(q, "bad-labels"), registry.FieldLabels, `not json`).Err())
	must(raw.HSet(ctx, e.reg.WorkerKey(q, "bad-pid"), registry.FieldPID, "-7").Err())
	must(raw.Del(ctx, e.reg.WorkerKey(q, "wrong-type")).Err())
	must(raw.Set(ctx, e.reg.WorkerKey(q, "wrong-type"), "surprise", 0).Err())
	// Index entries that no registration writes.
	must(raw.ZAdd(ctx, e.reg.IndexKey(), zmember("no-separator"), zmember("a b\x00c"), zmember(q+"\x00"), zmember("\x00x")).Err())
	// A heartbeat entry that is not a server ID, long dead.
	must(raw.ZAdd(ctx, e.reg.HeartbeatKey(q), zscored(1, "not a server id"), zscored(2, "")).Err())

	// Get names the key and the field.
	for id, field := range map[string]string{
		"bad-counter": registry.FieldTotalCompleted, "bad-status": registry.FieldStatus,
		"bad-caps": registry.FieldCapabilities, "bad-labels": registry.FieldLabels, "bad-pid": registry.FieldPID,
		"wrong-type": "not a hash",
	} {
		_, err := e.reg.Get(ctx, q, id)
		if !errors.Is(err, registry.ErrMalformed) || !strings.Contains(err.Error(), e.reg.WorkerKey(q, id)) || !strings.Contains(err.Error(), field) {
			t.Fatalf("Get %s = %v, want ErrMalformed naming the key and %s", id, err, field)
		}
	}

	// List skips what it cannot read, and counts it.
	got := keysOf(listAll(t, e, registry.Filter{}, 3, nil))
	want := []string{q + "/good-1", q + "/good-2"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("List = %v, want %v", got, want)
	}
	if c := e.counter(t, registry.MetricMalformed, map[string]string{"op": "list"}); c < 10 {
		t.Fatalf("malformed entries counted by List: %d, want at least 10", c)
	}

	// A heartbeat repairs a garbage counter (it restarts from the delta); an unknown status is not
	// registered (the worker registers again, which replaces the record).
	if st, err := e.reg.Heartbeat(ctx, q, "bad-counter", registry.Beat{CompletedDelta: 4}); err != nil || st != registry.StatusOnline {
		t.Fatalf("heartbeat with a garbage counter: %v %v", st, err)
	}
	if w := e.get(t, q, "bad-counter"); w.TotalCompleted != 4 {
		t.Fatalf("repaired counter: %d", w.TotalCompleted)
	}
	for _, id := range []string{"bad-status", "wrong-type"} {
		_, err := e.reg.Heartbeat(ctx, q, id, registry.Beat{})
		if !errors.Is(err, registry.ErrNotRegistered) || !errors.Is(err, registry.ErrMalformed) {
			t.Fatalf("heartbeat of %s: %v, want ErrNotRegistered and ErrMalformed", id, err)
		}
	}
	if err := e.reg.Drain(ctx, q, "bad-status"); !errors.Is(err, registry.ErrMalformed) {
		t.Fatalf("drain of a garbage status: %v", err)
	}

	// Evict still evicts the dead workers whose records are garbage, and drops garbage entries.
	e.register(t, worker(q, "good-1")) // fresh
	// Every one to be evicted, bad-counter included: its heartbeat above came after the registrations.
	for _, id := range []string{"good-2", "bad-counter", "bad-status", "bad-caps", "bad-labels", "bad-pid", "wrong-type"} {
		e.waitStale(t, q, id, e.reg.Config().EvictAfter)
	}
	// Keep good-1 fresh: only it heartbeats from now on.
	if _, err := e.reg.Heartbeat(ctx, q, "good-1", registry.Beat{}); err != nil {
		t.Fatal(err)
	}
	n, err := e.reg.Evict(ctx, &fakeTerm{token: 1}, q)
	if err != nil {
		t.Fatalf("Evict: %v", err)
	}
	// good-2, bad-counter, bad-status, bad-caps, bad-labels, bad-pid, wrong-type.
	if n != 7 {
		t.Fatalf("evicted %d, want 7", n)
	}
	left, _ := raw.ZRange(ctx, e.reg.HeartbeatKey(q), 0, -1).Result()
	if strings.Join(left, ",") != "good-1" {
		t.Fatalf("heartbeat set after eviction: %q", left)
	}
	if ttl, _ := raw.PTTL(ctx, e.reg.WorkerKey(q, "wrong-type")).Result(); ttl <= 0 {
		t.Fatalf("the garbage record of an evicted worker does not expire: %v", ttl)
	}
	if _, err := e.reg.Get(ctx, q, "bad-caps"); !errors.Is(err, registry.ErrMalformed) {
		t.Fatalf("evicted garbage record still reported as malformed: %v", err)
	}
	st, err := raw.HGet(ctx, e.reg.WorkerKey(q, "bad-status"), registry.FieldStatus).Result()
	if err != nil || st != "OFFLINE" {
		t.Fatalf("evicted bad-status record: status %q %v", st, err)
	}
	if c := e.counter(t, registry.MetricMalformed, map[string]string{"op": "evict"}); c < 3 {
		t.Fatalf("malformed entries counted by Evict: %d", c)
	}
	// Deregistering a garbage record works too.
	e.register(t, worker(q, "bad-later"))
	must(raw.HSet(ctx, e.reg.WorkerKey(q, "bad-later"), registry.FieldStatus, "???").Err())
	if err := e.reg.Deregister(ctx, q, "bad-later"); err != nil {
		t.Fatalf("deregister garbage: %v", err)
	}
}

func TestWrongTypeKeys(t *testing.T) {
	e := newEnv(t, registry.Config{HeartbeatInterval: 50 * time.Millisecond})
	ctx := t.Context()
	raw := e.rdb
	// The heartbeat set and the index hold strings.
	if err := raw.Set(ctx, e.reg.HeartbeatKey("orders"), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := raw.Set(ctx, e.reg.IndexKey(), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.reg.Evict(ctx, &fakeTerm{token: 1}, "orders"); !errors.Is(err, registry.ErrMalformed) || !strings.Contains(err.Error(), e.reg.HeartbeatKey("orders")) {
		t.Fatalf("Evict over a string heartbeat set: %v", err)
	}
	if _, _, err := e.reg.List(ctx, registry.Filter{}, "", 10); !errors.Is(err, registry.ErrMalformed) || !strings.Contains(err.Error(), e.reg.IndexKey()) {
		t.Fatalf("List over a string index: %v", err)
	}
	// Registration replaces them (they hold nothing of value), and everything works again.
	e.register(t, worker("orders", "w-1"))
	if ws, _, err := e.reg.List(ctx, registry.Filter{}, "", 10); err != nil || len(ws) != 1 {
		t.Fatalf("List after repair: %v %v", ws, err)
	}
	e.waitStale(t, "orders", "w-1", e.reg.Config().EvictAfter)
	if n, err := e.reg.Evict(ctx, &fakeTerm{token: 1}, "orders"); err != nil || n != 1 {
		t.Fatalf("Evict after repair: %d %v", n, err)
	}
	if c := e.counter(t, registry.MetricMalformed, map[string]string{"op": "register"}); c != 2 {
		t.Fatalf("keys replaced by Register: %d, want 2", c)
	}
}

func TestRedisDown(t *testing.T) {
	e := newEnv(t, registry.Config{})
	redisx.SkipExternal(t, e.srv)
	e.register(t, worker("orders", "w-1"))
	if err := e.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	check := func(op string, err error) {
		t.Helper()
		if err == nil || !strings.HasPrefix(err.Error(), "registry: ") || !strings.Contains(err.Error(), "refused") {
			t.Fatalf("%s with Redis down: %v, want a registry error saying the connection was refused", op, err)
		}
		t.Logf("%s: %v", op, err)
	}
	_, err := e.reg.Register(ctx, worker("orders", "w-2"))
	check("Register", err)
	_, err = e.reg.Heartbeat(ctx, "orders", "w-1", registry.Beat{})
	check("Heartbeat", err)
	check("Drain", e.reg.Drain(ctx, "orders", "w-1"))
	check("Deregister", e.reg.Deregister(ctx, "orders", "w-1"))
	_, err = e.reg.Get(ctx, "orders", "w-1")
	check("Get", err)
	_, _, err = e.reg.List(ctx, registry.Filter{}, "", 10)
	check("List", err)
	_, err = e.reg.Evict(ctx, &fakeTerm{token: 1}, "orders")
	check("Evict", err)
	if c := e.counter(t, registry.MetricHeartbeats, map[string]string{"result": "error"}); c != 1 {
		t.Fatalf("failed heartbeats counted: %d", c)
	}

	// A restarted, empty Redis (no persistence): the worker is told to register again, and can
	// (the scripts are loaded again on the way).
	if err := e.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "Redis back", func() error {
		_, err := e.reg.Heartbeat(ctx, "orders", "w-1", registry.Beat{})
		if errors.Is(err, registry.ErrNotRegistered) {
			return nil
		}
		return errors.New(fmt.Sprint(err))
	})
	e.register(t, worker("orders", "w-1"))
	if st, err := e.reg.Heartbeat(ctx, "orders", "w-1", registry.Beat{}); err != nil || st != registry.StatusOnline {
		t.Fatalf("after re-register: %v %v", st, err)
	}
}

package registry_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/registry"
)

// elector returns an Elector on its own etcd client, closed on cleanup.
func elector(t *testing.T, c *etcdx.Cluster) *election.Elector {
	t.Helper()
	el, err := election.New(etcdx.Client(t, c), election.Config{Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
		defer cancel()
		_ = el.Close(ctx)
	})
	return el
}

// evictLoop is a queue leader's eviction loop: Evict every interval while the term lasts. The test
// owns its goroutine; stop waits for it.
type evictLoop struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	passes  int
	evicted int
	errs    []error
}

func (l *evictLoop) passCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.passes
}

func (e *env) evictEvery(t *testing.T, term registry.Term, queue string, interval time.Duration) *evictLoop {
	ctx, cancel := context.WithCancel(t.Context())
	l := &evictLoop{cancel: cancel}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			n, err := e.reg.Evict(ctx, term, queue)
			l.mu.Lock()
			l.passes++
			l.evicted += n
			if err != nil && ctx.Err() == nil {
				l.errs = append(l.errs, err)
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(l.stop)
	return l
}

func (l *evictLoop) stop() { l.cancel(); l.wg.Wait() }

func TestLeaderEvictsDeadWorkers(t *testing.T) {
	const interval = 200 * time.Millisecond
	// EvictAfter well above the interval: a live worker's heartbeat goroutine may be late on a loaded
	// machine with the race detector on, and must not be evicted for it.
	const evictAfter = 1500 * time.Millisecond
	e := newEnv(t, registry.Config{HeartbeatInterval: interval, EvictAfter: evictAfter})
	etcd := etcdx.Start(t, etcdx.Options{})
	term, err := elector(t, etcd).Campaign(t.Context(), project, "orders", "leader-1")
	if err != nil {
		t.Fatal(err)
	}

	live := []string{"live-1", "live-2", "live-3"}
	dead := []string{"dead-1", "dead-2"}
	var beaters []*heartbeater
	for _, id := range append(append([]string{}, live...), dead...) {
		e.register(t, worker("orders", id))
	}
	for _, id := range live {
		beaters = append(beaters, e.heartbeat(t, "orders", id, interval))
	}
	// The dead workers heartbeat once more, then stop (a crash).
	for _, id := range dead {
		if _, err := e.reg.Heartbeat(t.Context(), "orders", id, registry.Beat{Active: 2}); err != nil {
			t.Fatal(err)
		}
	}
	lastBeat := map[string]time.Time{}
	for _, id := range dead {
		lastBeat[id] = e.get(t, "orders", id).LastHeartbeat
	}

	loop := e.evictEvery(t, term, "orders", interval)
	for _, id := range dead {
		eventually(t, 30*time.Second, id+" evicted", func() error {
			if w := e.get(t, "orders", id); w.Status != registry.StatusOffline {
				return fmt.Errorf("status %s", w.Status)
			}
			return nil
		})
	}
	// Let the loop make a few more passes over the live workers, then stop it.
	after := loop.passCount()
	eventually(t, 30*time.Second, "4 more eviction passes", func() error {
		if n := loop.passCount() - after; n < 4 {
			return fmt.Errorf("%d passes", n)
		}
		return nil
	})
	loop.stop()
	for _, h := range beaters {
		h.stop()
	}

	for _, id := range dead {
		w := e.get(t, "orders", id)
		// By Redis time: never before the threshold, and within the threshold plus one eviction
		// pass (plus scheduling slack for a loaded machine).
		age := w.DeregisteredAt.Sub(lastBeat[id])
		if age <= evictAfter || age > evictAfter+interval+5*time.Second {
			t.Fatalf("%s evicted %v after its last heartbeat, want in (%v, %v + one pass]", id, age, evictAfter, evictAfter)
		}
		if w.EvictedBy != term.Token() {
			t.Fatalf("%s EvictedBy %d, want the term's token %d", id, w.EvictedBy, term.Token())
		}
		if _, err := e.rdb.ZScore(t.Context(), e.reg.HeartbeatKey("orders"), id).Result(); !errors.Is(err, redis.Nil) {
			t.Fatalf("%s still in the heartbeat set (%v)", id, err)
		}
		// The evicted worker learns it from its next heartbeat, and can register again.
		if st, err := e.reg.Heartbeat(t.Context(), "orders", id, registry.Beat{}); !errors.Is(err, registry.ErrNotRegistered) || st != registry.StatusOffline {
			t.Fatalf("heartbeat of evicted %s: %v %v", id, st, err)
		}
	}
	for _, id := range live {
		if w := e.get(t, "orders", id); w.Status != registry.StatusOnline {
			t.Fatalf("live worker %s is %s", id, w.Status)
		}
	}
	for _, h := range beaters {
		if errs := h.errors(); len(errs) > 0 {
			t.Fatalf("heartbeats failed: %v", errs)
		}
	}
	loop.mu.Lock()
	defer loop.mu.Unlock()
	if len(loop.errs) > 0 || loop.evicted != len(dead) {
		t.Fatalf("eviction loop: evicted %d, errors %v", loop.evicted, loop.errs)
	}
	if c := e.counter(t, registry.MetricEvictions, map[string]string{"project": project, "queue": "orders"}); c != int64(len(dead)) {
		t.Fatalf("%s = %d, want %d", registry.MetricEvictions, c, len(dead))
	}
	e.register(t, worker("orders", "dead-1"))
	if w := e.get(t, "orders", "dead-1"); w.Status != registry.StatusOnline || w.EvictedBy != 0 {
		t.Fatalf("re-registered after eviction: %+v", w)
	}
}

// heartbeatBeforeEvict makes a hook that, the first time the eviction script is about to be sent,
// heartbeats a worker through another client: the heartbeat lands between Evict's listing of
// candidates and its eviction script.
type heartbeatBeforeEvict struct {
	once sync.Once
	beat func(ctx context.Context)
}

func (h *heartbeatBeforeEvict) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *heartbeatBeforeEvict) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *heartbeatBeforeEvict) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && strings.Contains(fmt.Sprint(cmd.Args()), "/fence/") {
			h.once.Do(func() { h.beat(ctx) })
		}
		return next(ctx, cmd)
	}
}

func TestWorkerHeartbeatingBetweenListingAndEvictionIsSpared(t *testing.T) {
	const interval = 100 * time.Millisecond
	e := newEnv(t, registry.Config{HeartbeatInterval: interval})
	evictAfter := e.reg.Config().EvictAfter
	e.register(t, worker("orders", "late"))
	e.register(t, worker("orders", "dead"))
	e.waitStale(t, "orders", "late", evictAfter)
	e.waitStale(t, "orders", "dead", evictAfter)

	// The leader's registry uses a client whose hook heartbeats "late" right before the eviction
	// script is sent: "late" was listed as stale, and is fresh when the script runs.
	leaderClient := e.srv.NewClient()
	t.Cleanup(func() { leaderClient.Close() })
	hook := &heartbeatBeforeEvict{beat: func(ctx context.Context) {
		if _, err := e.reg.Heartbeat(ctx, "orders", "late", registry.Beat{Active: 1}); err != nil {
			t.Errorf("late heartbeat: %v", err)
		}
	}}
	leaderClient.AddHook(hook)
	leader := e.registry(t, leaderClient, registry.Config{Prefix: e.reg.Config().Prefix, HeartbeatInterval: interval})

	n, err := leader.Evict(t.Context(), &fakeTerm{token: 1}, "orders")
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Fatalf("evicted %d, want only the dead worker", n)
	}
	if w := e.get(t, "orders", "late"); w.Status != registry.StatusOnline {
		t.Fatalf("the worker that heartbeated between listing and eviction is %s", w.Status)
	}
	if w := e.get(t, "orders", "dead"); w.Status != registry.StatusOffline {
		t.Fatalf("the dead worker is %s", w.Status)
	}
	called := false
	hook.once.Do(func() { called = true })
	if called {
		t.Fatal("the hook never ran: the test did not exercise the race")
	}
}

func TestEvictionFencing(t *testing.T) {
	const interval = 100 * time.Millisecond
	e := newEnv(t, registry.Config{HeartbeatInterval: interval})
	evictAfter := e.reg.Config().EvictAfter
	etcd := etcdx.Start(t, etcdx.Options{})
	elA, elB := elector(t, etcd), elector(t, etcd)

	termA, err := elA.Campaign(t.Context(), project, "orders", "a")
	if err != nil {
		t.Fatal(err)
	}
	e.register(t, worker("orders", "w-1"))
	e.waitStale(t, "orders", "w-1", evictAfter)
	if n, err := e.reg.Evict(t.Context(), termA, "orders"); err != nil || n != 1 {
		t.Fatalf("leader A evicts: %d %v", n, err)
	}

	// A resigns, B takes over with a higher token and evicts.
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	termB, err := elB.Campaign(t.Context(), project, "orders", "b")
	if err != nil {
		t.Fatal(err)
	}
	if termB.Token() <= termA.Token() {
		t.Fatalf("tokens: A %d, B %d", termA.Token(), termB.Token())
	}
	e.register(t, worker("orders", "w-2"))
	e.register(t, worker("orders", "w-3"))
	e.waitStale(t, "orders", "w-3", evictAfter)
	if n, err := e.reg.Evict(t.Context(), termB, "orders"); err != nil || n != 2 {
		t.Fatalf("leader B evicts: %d %v", n, err)
	}

	// A's ended term is refused locally.
	e.register(t, worker("orders", "w-4"))
	e.waitStale(t, "orders", "w-4", evictAfter)
	if n, err := e.reg.Evict(t.Context(), termA, "orders"); !errors.Is(err, registry.ErrNotLeader) || n != 0 {
		t.Fatalf("resigned term evicts: %d %v", n, err)
	}
	// A paused old leader whose local check still passes (its pause outlasted its lease) carries
	// A's token: Redis refuses it, and w-4 stays.
	paused := &fakeTerm{token: termA.Token()}
	if n, err := e.reg.Evict(t.Context(), paused, "orders"); !errors.Is(err, registry.ErrSuperseded) || n != 0 {
		t.Fatalf("superseded token evicts: %d %v", n, err)
	}
	if w := e.get(t, "orders", "w-4"); w.Status != registry.StatusOnline {
		t.Fatalf("w-4 is %s after a superseded eviction", w.Status)
	}
	if n, err := e.reg.Evict(t.Context(), termB, "orders"); err != nil || n != 1 {
		t.Fatalf("leader B evicts w-4: %d %v", n, err)
	}
	if w := e.get(t, "orders", "w-4"); w.EvictedBy != termB.Token() {
		t.Fatalf("w-4 EvictedBy %d, want %d", w.EvictedBy, termB.Token())
	}
	// Fencing is per queue: B's token does not fence another queue.
	e.register(t, worker("payments", "p-1"))
	e.waitStale(t, "payments", "p-1", evictAfter)
	if n, err := e.reg.Evict(t.Context(), paused, "payments"); err != nil || n != 1 {
		t.Fatalf("evict on another queue: %d %v", n, err)
	}
}

func TestEvictInBatchesAndPruneIndex(t *testing.T) {
	const interval = 50 * time.Millisecond
	e := newEnv(t, registry.Config{HeartbeatInterval: interval, EvictBatch: 7, Retention: 300 * time.Millisecond})
	for i := range 40 {
		e.register(t, worker("orders", fmt.Sprintf("w-%02d", i)))
	}
	e.register(t, worker("payments", "p-1"))
	e.waitStale(t, "orders", "w-39", e.reg.Config().EvictAfter)
	term := &fakeTerm{token: 3}
	n, err := e.reg.Evict(t.Context(), term, "orders")
	if err != nil || n != 40 {
		t.Fatalf("evicted %d (%v), want all 40 across batches of 7", n, err)
	}
	if n, _ := e.rdb.ZCard(t.Context(), e.reg.HeartbeatKey("payments")).Result(); n != 1 {
		t.Fatalf("evicting orders touched payments: %d left", n)
	}
	// Once the OFFLINE records expire, later passes prune their index entries (a batch at a time).
	eventually(t, 30*time.Second, "index pruned", func() error {
		if _, err := e.reg.Evict(t.Context(), term, "orders"); err != nil {
			return err
		}
		left, err := e.rdb.ZRange(t.Context(), e.reg.IndexKey(), 0, -1).Result()
		if err != nil || len(left) == 1 {
			return err
		}
		// What is left, and when each record expires: a failure says which entries stay, and why.
		var entries []string
		for _, m := range left {
			q, id, _ := strings.Cut(m, "\x00")
			pttl, _ := e.rdb.PTTL(t.Context(), e.reg.WorkerKey(q, id)).Result()
			entries = append(entries, fmt.Sprintf("%s/%s (record pttl %v)", q, id, pttl))
		}
		return fmt.Errorf("index holds %d entries: %s", len(left), strings.Join(entries, ", "))
	})
	term.ended.Store(true)
	if _, err := e.reg.Evict(t.Context(), term, "orders"); !errors.Is(err, registry.ErrNotLeader) {
		t.Fatalf("ended term: %v", err)
	}
}

// TestPruneKeepsARecordInItsLastMillisecond: inside a script, Redis still has a record in the
// millisecond it expires, with PTTL 0. A prune pass that meets it there must schedule its index entry
// again (the record is gone a moment later), not take it for a worker that registered again (PTTL -1)
// and forget the entry, which then stays in the index for good. Deregistrations one after another
// spread the records' expiry over many milliseconds, and prune passes back to back meet some of them
// in their last one.
func TestPruneKeepsARecordInItsLastMillisecond(t *testing.T) {
	e := newEnv(t, registry.Config{EvictBatch: 1000, Retention: 200 * time.Millisecond})
	const n = 300
	for i := range n {
		e.register(t, worker("orders", fmt.Sprintf("w-%03d", i)))
	}
	for i := range n {
		if err := e.reg.Deregister(t.Context(), "orders", fmt.Sprintf("w-%03d", i)); err != nil {
			t.Fatal(err)
		}
	}
	term := &fakeTerm{token: 3}
	last := e.reg.WorkerKey("orders", fmt.Sprintf("w-%03d", n-1))
	passes := 0
	// Back to back, no poll interval: a pass that waits misses the records' last milliseconds. The
	// records expire 200 ms after their deregistration; the bound only turns a hang into a failure.
	for deadline := time.Now().Add(time.Minute); ; {
		if time.Now().After(deadline) {
			t.Fatalf("%s still exists after %d prune passes and a minute", last, passes)
		}
		if _, err := e.reg.Evict(t.Context(), term, "orders"); err != nil {
			t.Fatal(err)
		}
		passes++
		if exists, err := e.rdb.Exists(t.Context(), last).Result(); err != nil {
			t.Fatal(err)
		} else if exists == 0 {
			break
		}
	}
	// Every record has expired: one more pass prunes what the passes above scheduled again.
	if _, err := e.reg.Evict(t.Context(), term, "orders"); err != nil {
		t.Fatal(err)
	}
	left, err := e.rdb.ZRange(t.Context(), e.reg.IndexKey(), 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("after %d prune passes, %d index entries outlived their records, among them %q", passes, len(left), left[:min(len(left), 5)])
	}
	t.Logf("%d prune passes", passes)
}

package election_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// heldCallback is an OnElected that records its term and, once the term's context is cancelled,
// keeps running (as a leader's in-flight Temporal call would) until the test releases it.
type heldCallback struct {
	terms     chan *election.Term
	cancelled chan struct{}
	release   chan struct{}
	released  sync.Once
	returned  chan struct{}
	at        atomic.Pointer[time.Time] // when OnElected returned
}

// letGo lets the callback return; later calls do nothing.
func (h *heldCallback) letGo() { h.released.Do(func() { close(h.release) }) }

func newHeldCallback() *heldCallback {
	return &heldCallback{terms: make(chan *election.Term, 1), cancelled: make(chan struct{}),
		release: make(chan struct{}), returned: make(chan struct{})}
}

func (h *heldCallback) onElected(ctx context.Context, term *election.Term) error {
	h.terms <- term
	<-ctx.Done()
	close(h.cancelled)
	<-h.release
	now := time.Now()
	h.at.Store(&now)
	close(h.returned)
	return nil
}

func (h *heldCallback) returnedAt() time.Time { return *h.at.Load() }

func recv[T any](t *testing.T, ch <-chan T, limit time.Duration, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(limit):
		t.Fatalf("timeout waiting for %s", what)
		var zero T
		return zero
	}
}

func keyExists(t *testing.T, cli *clientv3.Client, key string) bool {
	t.Helper()
	resp, err := cli.Get(t.Context(), key, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count == 1
}

// heldPair is node-a leading queue with its callback held (heldCallback) and node-b in line behind
// it, on one cluster; the test's cleanup lets the callback go and waits for both.
type heldPair struct {
	a, b     *candidate
	observer *clientv3.Client
	prefix   string
	held     *heldCallback
	aTerm    *election.Term
	stopA    context.CancelFunc // ends node-a's Run: its term resigns
	aDone    <-chan error       // what node-a's Run returned
	bTerms   *ledger            // node-b's terms
	deletes  *deleteWatcher     // the deletes under prefix, from before node-a's term
	aLost    <-chan struct{}    // closed when node-a's first session is lost (event.SessionLost)
}

// newHeldPair starts the pair; node-a reaches etcd through aEndpoints when given (a proxy).
func newHeldPair(t *testing.T, c *etcdx.Cluster, cfg election.Config, queue string, aEndpoints ...string) *heldPair {
	t.Helper()
	lost := make(chan struct{})
	var once sync.Once
	aCfg := cfg
	aCfg.Events = func(e event.Event) {
		if e.Kind == event.SessionLost {
			once.Do(func() { close(lost) })
		}
	}
	p := &heldPair{a: newCandidate(t, c, "node-a", aCfg, aEndpoints...), b: newCandidate(t, c, "node-b", cfg),
		observer: etcdx.Client(t, c), held: newHeldCallback(), bTerms: newLedger(), aLost: lost}
	p.prefix = p.a.el.ElectionKey(project, queue)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	aDone := make(chan error, 1)
	t.Cleanup(func() {
		p.held.letGo()
		cancel()
		wg.Wait()
		select {
		case err := <-aDone:
			if err != nil {
				t.Errorf("node-a: Run: %v", err)
			}
		default:
		}
	})
	p.deletes = watchDeletes(t, ctx, p.observer, p.prefix, &wg)
	aCtx, stopA := context.WithCancel(ctx)
	p.stopA, p.aDone = stopA, aDone
	wg.Go(func() {
		aDone <- p.a.el.Run(aCtx, project, queue, p.a.id, election.Callbacks{OnElected: p.held.onElected})
	})
	p.aTerm = recv(t, p.held.terms, 10*time.Second, "node-a's term")
	runCandidate(t, ctx, p.b, queue, p.bTerms, &wg)
	waitCandidates(t, p.observer, p.prefix, 2, 10*time.Second)
	return p
}

// stopped stops node-a's Run and waits for its term to resign.
func (p *heldPair) stopped(t *testing.T) {
	t.Helper()
	p.stopA()
	recv(t, p.held.cancelled, 10*time.Second, "node-a's term context to be cancelled")
	if !errors.Is(p.aTerm.Err(), election.ErrResigned) {
		t.Fatalf("a stopped leader's term ended with %v, want ErrResigned", p.aTerm.Err())
	}
}

// notElectedFor fails the test if node-b is elected within d.
func (p *heldPair) notElectedFor(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case term := <-p.bTerms.elected:
		t.Fatalf("%s was elected while node-a's callback was still running (node-a's key present: %v)",
			term.LeaderID(), keyExists(t, p.observer, p.aTerm.Key()))
	case <-time.After(d):
	}
}

// runningOn fails the test if node-a's Run has returned.
func (p *heldPair) runningOn(t *testing.T) {
	t.Helper()
	select {
	case err := <-p.aDone:
		t.Fatalf("Run returned (%v) while its callback still runs", err)
	default:
	}
}

// A graceful stop ends the term (its context is cancelled with ErrResigned) but deletes the key only
// once OnElected has returned: no follower can be elected while the old leader still acts.
func TestGracefulStopDeletesTheKeyAfterTheCallbackReturned(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	// A drain bound far beyond the test's own hold, so that load cannot make it matter.
	p := newHeldPair(t, c, election.Config{ResignTimeout: 20 * time.Second}, "drain")

	p.stopped(t)
	// The old leader still acts: its key must hold the election, and stay, for as long as it does.
	if !keyExists(t, p.observer, p.aTerm.Key()) {
		t.Fatal("the key was deleted while the old leader's callback was still running")
	}
	p.notElectedFor(t, 500*time.Millisecond)
	if !keyExists(t, p.observer, p.aTerm.Key()) {
		t.Fatal("the key was deleted while the old leader's callback was still running")
	}
	p.runningOn(t)

	p.held.letGo()
	bTerm := waitElected(t, p.bTerms, 10*time.Second)
	deleted := p.deletes.waitFor(t, p.aTerm.Key(), 10*time.Second)
	returned := p.held.returnedAt()
	if bTerm.Started().Before(returned) || deleted.Before(returned) {
		t.Fatalf("successor started %v and key deleted %v relative to the old callback's return; both must come after",
			bTerm.Started().Sub(returned), deleted.Sub(returned))
	}
	if err := recv(t, p.aDone, 10*time.Second, "node-a's Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	t.Logf("callback returned → key deleted %v → successor elected %v", deleted.Sub(returned), bTerm.Started().Sub(deleted))
}

// The Elector's sweep deletes keys of its session that no campaign stands behind (a restore of etcd
// can bring such keys back). A resigning leader's key stands behind a callback that still runs: the
// sweep must leave it, or a successor is elected while the old leader acts. A 2 s TTL sweeps every
// 1-2 s, so the callback's hold of three TTLs spans several sweeps.
func TestSweepLeavesTheKeyOfACallbackStillRunning(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cfg := election.Config{TTL: election.MinTTL, ResignTimeout: 30 * time.Second}
	p := newHeldPair(t, c, cfg, "swept")

	p.stopped(t)
	p.notElectedFor(t, 3*cfg.TTL)
	p.held.letGo()
	bTerm := waitElected(t, p.bTerms, 10*time.Second)
	if returned := p.held.returnedAt(); bTerm.Started().Before(returned) {
		t.Fatalf("successor started %v before the old callback returned", returned.Sub(bTerm.Started()))
	}
}

// A callback that ignores its cancelled context holds the handover up for ResignTimeout only; Run
// still waits for it before returning.
func TestGracefulStopDrainIsBounded(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	p := newHeldPair(t, c, election.Config{ResignTimeout: 500 * time.Millisecond}, "stuck")

	p.stopA()
	if term := waitElected(t, p.bTerms, 30*time.Second); term.LeaderID() != "node-b" {
		t.Fatalf("want node-b to lead, got %s", term.LeaderID())
	}
	p.runningOn(t)
	p.held.letGo()
	if err := recv(t, p.aDone, 10*time.Second, "node-a's Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
}

// A leader callback that fails at once (a wrong Temporal namespace) must not make Run stand again at
// once: the campaigns back off, so the count over a few seconds stays small. Load only lowers it.
func TestFailingCallbackBacksOff(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	a := newCandidate(t, c, "node-a", election.Config{}) // RetryMin 100ms, RetryMax 5s
	ctx, cancel := context.WithCancel(t.Context())
	var mu sync.Mutex
	var calls []time.Time
	var causes []error
	done := make(chan error, 1)
	go func() {
		done <- a.el.Run(ctx, project, "broken", a.id, election.Callbacks{
			OnElected: func(context.Context, *election.Term) error {
				mu.Lock()
				calls = append(calls, time.Now())
				mu.Unlock()
				return errors.New("namespace not found")
			},
			OnStepDown: func(_ *election.Term, cause error) {
				mu.Lock()
				causes = append(causes, cause)
				mu.Unlock()
			},
		})
	}()
	const window = 4 * time.Second
	time.Sleep(window) // a measurement window, not a wait for an event
	cancel()
	if err := recv(t, done, 10*time.Second, "Run to return"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(calls) == 0 {
		t.Fatal("OnElected was never called")
	}
	n := 0
	for _, at := range calls {
		if at.Sub(calls[0]) < window {
			n++
		}
	}
	// Backoff 100ms doubling to 5s, jittered to [d/2, d]: at most 7 calls start within 4s.
	if n > 8 {
		t.Fatalf("%d leader callbacks within %v of the first: a failing callback must back off", n, window)
	}
	for _, cause := range causes {
		if !errors.Is(cause, election.ErrResigned) {
			t.Errorf("a failed callback's term ended with %v, want ErrResigned", cause)
		}
	}
	t.Logf("%d failing leader callbacks within %v", n, window)
}

// When the watchdog ends a cut-off leader's term, the lease is revoked only once the leader callback
// has returned (or the local lease deadline has come): a successor cannot start while it still acts.
func TestWatchdogLossRevokesAfterTheCallbackReturned(t *testing.T) {
	watchdogLossWhileTheCallbackRuns(t, "cutoff", false)
}

// A graceful stop's resign waits for its callback (up to ResignTimeout) before it deletes the key. A
// session lost meanwhile (etcd unreachable) must wait for that callback too before it revokes the
// lease, or the revoke deletes the key while the old leader still acts.
func TestWatchdogLossDuringAResignRevokesAfterTheCallbackReturned(t *testing.T) {
	watchdogLossWhileTheCallbackRuns(t, "resigning", true)
}

// watchdogLossWhileTheCallbackRuns cuts node-a (the leader of queue, its callback held) off from
// etcd until its watchdog ends the session, lets etcd answer again and checks that node-b is elected
// only after the callback returned or the local lease deadline came. With resign, node-a's Run is
// stopped first: the term resigns and its callback drains while the session is lost.
func watchdogLossWhileTheCallbackRuns(t *testing.T, queue string, resign bool) {
	c := etcdx.Start(t, etcdx.Options{})
	proxy := etcdx.NewTestProxy(t, c.MemberEndpoint(0))
	cfg := election.Config{TTL: 6 * time.Second, SafetyMargin: 1500 * time.Millisecond}
	if resign {
		cfg.ResignTimeout = 30 * time.Second // the resign's own delete must not come first
	}
	p := newHeldPair(t, c, cfg, queue, proxy.URL())

	want := election.ErrLeaseDeadline
	if resign {
		want = election.ErrResigned
		p.stopped(t)
	}
	proxy.Blackhole()
	if resign {
		recv(t, p.aLost, 5*cfg.TTL, "node-a's session to be lost")
	} else {
		recv(t, p.held.cancelled, 5*cfg.TTL, "the watchdog to end node-a's term")
	}
	if !errors.Is(p.aTerm.Err(), want) {
		t.Fatalf("node-a's term ended with %v, want %v", p.aTerm.Err(), want)
	}
	localDeadline := p.aTerm.ValidUntil().Add(cfg.SafetyMargin)
	// etcd answers again while the old leader's callback still runs: a revoke now would let node-b in.
	proxy.Heal()
	p.notElectedFor(t, 700*time.Millisecond)
	p.held.letGo()
	<-p.held.returned
	bTerm := waitElected(t, p.bTerms, 5*cfg.TTL)
	deleted := p.deletes.waitFor(t, p.aTerm.Key(), 5*cfg.TTL)
	out := p.held.returnedAt()
	if localDeadline.Before(out) {
		out = localDeadline // past the local deadline the lease may expire anyway
	}
	if deleted.Before(out) || bTerm.Started().Before(out) {
		t.Fatalf("key deleted %v and successor started %v relative to min(callback returned, local deadline); both must come after",
			deleted.Sub(out), bTerm.Started().Sub(out))
	}
	t.Logf("term ended → callback returned %v; key deleted %v after min(callback returned, local deadline)",
		p.held.returnedAt().Sub(mustEnded(t, p.aTerm)), deleted.Sub(out))
}

func mustEnded(t *testing.T, term *election.Term) time.Time {
	t.Helper()
	ended, ok := term.Ended()
	if !ok {
		t.Fatal("term has not ended")
	}
	return ended
}

// A session lost while etcd could not be reached leaves its lease behind; an etcd that elects a new
// raft leader extends every lease by its TTL. Once etcd answers again the lease must be revoked
// promptly, not left to expire.
//
// The new raft leader comes from a leadership transfer in a three-member cluster, not from a restart:
// the member behind the proxy must stay up. While it is down, etcd's proxy accepts the client's
// reconnect and, failing to dial the member, leaves that connection open without a word (no network
// does that: a stopped server refuses), and gRPC waits 20 s (its MinConnectTimeout) on it.
func TestAbandonedLeaseIsRevokedOnceEtcdAnswers(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{Members: 3})
	if c.External() {
		t.Skip("BATON_ETCD_ENDPOINTS is set: cannot move an external etcd's leader")
	}
	proxy := etcdx.NewTestProxy(t, c.MemberEndpoint(0))
	cfg := election.Config{TTL: 12 * time.Second, ResignTimeout: 500 * time.Millisecond}
	a := newCandidate(t, c, "node-a", cfg, proxy.URL())
	observer := etcdx.Client(t, c)
	prefix := a.el.ElectionKey(project, "abandoned")

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	deletes := watchDeletes(t, ctx, observer, prefix, &wg)
	term, err := a.el.Campaign(ctx, project, "abandoned", a.id)
	if err != nil {
		t.Fatal(err)
	}

	proxy.Blackhole()
	recv(t, term.Done(), 5*cfg.TTL, "the watchdog to end the term")
	if !errors.Is(term.Err(), election.ErrSessionLost) {
		t.Fatalf("term ended with %v, want ErrSessionLost", term.Err())
	}
	// etcd elects a leader again, which extends every lease, ours included.
	lead, err := c.WaitLeader(etcdx.DefaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.MoveLeader(t.Context(), (lead+1)%c.Size()); err != nil {
		t.Fatal(err)
	}
	// Hold the partition until a single revoke attempt would surely have timed out.
	time.Sleep(time.Until(mustEnded(t, term).Add(2 * cfg.ResignTimeout)))
	healed := time.Now()
	proxy.Heal()
	deleted := deletes.waitFor(t, term.Key(), 5*cfg.TTL)
	// etcd would keep the key for about a TTL after its restart; the retried revoke removes it once
	// the connection is back. Half the TTL is a generous bound for a reconnect and a revoke.
	if took := deleted.Sub(healed); took > cfg.TTL/2 {
		t.Fatalf("the abandoned lease's key lingered %v after etcd answered again, want < %v", took, cfg.TTL/2)
	}
	t.Logf("abandoned key removed %v after the connection came back", deleted.Sub(healed).Round(time.Millisecond))
}

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
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// heldCallback is an OnElected that records its term and, once the term's context is cancelled,
// keeps running (as a leader's in-flight Temporal call would) until the test releases it.
type heldCallback struct {
	terms     chan *election.Term
	cancelled chan struct{}
	release   chan struct{}
	returned  chan struct{}
	at        atomic.Pointer[time.Time] // when OnElected returned
}

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

// A graceful stop ends the term (its context is cancelled with ErrResigned) but deletes the key only
// once OnElected has returned: no follower can be elected while the old leader still acts.
func TestGracefulStopDeletesTheKeyAfterTheCallbackReturned(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	// A drain bound far beyond the test's own hold, so that load cannot make it matter.
	cfg := election.Config{ResignTimeout: 20 * time.Second}
	a := newCandidate(t, c, "node-a", cfg)
	b := newCandidate(t, c, "node-b", cfg)
	observer := etcdx.Client(t, c)
	prefix := a.el.ElectionKey(project, "drain")

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	deletes := watchDeletes(t, ctx, observer, prefix, &wg)

	held := newHeldCallback()
	aCtx, stopA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.el.Run(aCtx, project, "drain", a.id, election.Callbacks{OnElected: held.onElected})
	}()
	aTerm := recv(t, held.terms, 10*time.Second, "node-a's term")
	l := newLedger()
	runCandidate(t, ctx, b, "drain", l, &wg)
	waitCandidates(t, observer, prefix, 2, 10*time.Second)

	stopA()
	recv(t, held.cancelled, 10*time.Second, "node-a's term context to be cancelled")
	if !errors.Is(aTerm.Err(), election.ErrResigned) {
		t.Fatalf("a stopped leader's term ended with %v, want ErrResigned", aTerm.Err())
	}
	// The old leader still acts: its key must hold the election, and stay, for as long as it does.
	if !keyExists(t, observer, aTerm.Key()) {
		t.Fatal("the key was deleted while the old leader's callback was still running")
	}
	select {
	case term := <-l.elected:
		t.Fatalf("%s was elected while the old leader's callback was still running", term.LeaderID())
	case <-time.After(500 * time.Millisecond):
	}
	if !keyExists(t, observer, aTerm.Key()) {
		t.Fatal("the key was deleted while the old leader's callback was still running")
	}
	select {
	case err := <-aDone:
		t.Fatalf("Run returned (%v) before its callback did", err)
	default:
	}

	close(held.release)
	bTerm := waitElected(t, l, 10*time.Second)
	deleted := deletes.waitFor(t, aTerm.Key(), 10*time.Second)
	returned := held.returnedAt()
	if bTerm.Started().Before(returned) || deleted.Before(returned) {
		t.Fatalf("successor started %v and key deleted %v relative to the old callback's return; both must come after",
			bTerm.Started().Sub(returned), deleted.Sub(returned))
	}
	if err := recv(t, aDone, 10*time.Second, "node-a's Run to return"); err != nil {
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
	a := newCandidate(t, c, "node-a", cfg)
	b := newCandidate(t, c, "node-b", cfg)
	observer := etcdx.Client(t, c)
	prefix := a.el.ElectionKey(project, "swept")

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	held := newHeldCallback()
	defer func() {
		select {
		case <-held.release:
		default:
			close(held.release)
		}
		cancel()
		wg.Wait()
	}()
	aCtx, stopA := context.WithCancel(ctx)
	wg.Go(func() {
		if err := a.el.Run(aCtx, project, "swept", a.id, election.Callbacks{OnElected: held.onElected}); err != nil {
			t.Errorf("node-a: Run: %v", err)
		}
	})
	aTerm := recv(t, held.terms, 10*time.Second, "node-a's term")
	l := newLedger()
	runCandidate(t, ctx, b, "swept", l, &wg)
	waitCandidates(t, observer, prefix, 2, 10*time.Second)

	stopA()
	recv(t, held.cancelled, 10*time.Second, "node-a's term context to be cancelled")
	select {
	case term := <-l.elected:
		t.Fatalf("%s was elected while the old leader's callback was still running (key present: %v)",
			term.LeaderID(), keyExists(t, observer, aTerm.Key()))
	case <-time.After(3 * cfg.TTL):
	}
	close(held.release)
	bTerm := waitElected(t, l, 10*time.Second)
	if returned := held.returnedAt(); bTerm.Started().Before(returned) {
		t.Fatalf("successor started %v before the old callback returned", returned.Sub(bTerm.Started()))
	}
}

// A callback that ignores its cancelled context holds the handover up for ResignTimeout only; Run
// still waits for it before returning.
func TestGracefulStopDrainIsBounded(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cfg := election.Config{ResignTimeout: 500 * time.Millisecond}
	a := newCandidate(t, c, "node-a", cfg)
	b := newCandidate(t, c, "node-b", cfg)
	observer := etcdx.Client(t, c)
	prefix := a.el.ElectionKey(project, "stuck")

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	held := newHeldCallback()
	defer func() {
		select {
		case <-held.release:
		default:
			close(held.release)
		}
	}()
	aCtx, stopA := context.WithCancel(ctx)
	aDone := make(chan error, 1)
	go func() {
		aDone <- a.el.Run(aCtx, project, "stuck", a.id, election.Callbacks{OnElected: held.onElected})
	}()
	recv(t, held.terms, 10*time.Second, "node-a's term")
	l := newLedger()
	runCandidate(t, ctx, b, "stuck", l, &wg)
	waitCandidates(t, observer, prefix, 2, 10*time.Second)

	stopA()
	if term := waitElected(t, l, 30*time.Second); term.LeaderID() != "node-b" {
		t.Fatalf("want node-b to lead, got %s", term.LeaderID())
	}
	select {
	case err := <-aDone:
		t.Fatalf("Run returned (%v) while its callback still runs", err)
	default:
	}
	close(held.release)
	if err := recv(t, aDone, 10*time.Second, "node-a's Run to return"); err != nil {
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
	a := newCandidate(t, c, "node-a", cfg, proxy.URL())
	b := newCandidate(t, c, "node-b", cfg)
	observer := etcdx.Client(t, c)
	prefix := a.el.ElectionKey(project, queue)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	held := newHeldCallback()
	defer func() {
		select {
		case <-held.release:
		default:
			close(held.release)
		}
		cancel()
		wg.Wait()
	}()
	deletes := watchDeletes(t, ctx, observer, prefix, &wg)
	aCtx, stopA := context.WithCancel(ctx)
	defer stopA()
	wg.Go(func() {
		if err := a.el.Run(aCtx, project, queue, a.id, election.Callbacks{OnElected: held.onElected}); err != nil {
			t.Errorf("node-a: Run: %v", err)
		}
	})
	aTerm := recv(t, held.terms, 10*time.Second, "node-a's term")
	l := newLedger()
	runCandidate(t, ctx, b, queue, l, &wg)
	waitCandidates(t, observer, prefix, 2, 10*time.Second)

	want := election.ErrLeaseDeadline
	if resign {
		want = election.ErrResigned
		stopA()
		recv(t, held.cancelled, 10*time.Second, "node-a's term to resign")
	}
	proxy.Blackhole()
	if resign {
		waitSessionLost(t, a.el, 5*cfg.TTL)
	} else {
		recv(t, held.cancelled, 5*cfg.TTL, "the watchdog to end node-a's term")
	}
	if !errors.Is(aTerm.Err(), want) {
		t.Fatalf("node-a's term ended with %v, want %v", aTerm.Err(), want)
	}
	localDeadline := aTerm.ValidUntil().Add(cfg.SafetyMargin)
	// etcd answers again while the old leader's callback still runs: a revoke now would let node-b in.
	proxy.Heal()
	select {
	case <-time.After(700 * time.Millisecond):
	case <-l.elected:
		t.Fatal("node-b was elected while node-a's callback was still running")
	}
	close(held.release)
	<-held.returned
	bTerm := waitElected(t, l, 5*cfg.TTL)
	deleted := deletes.waitFor(t, aTerm.Key(), 5*cfg.TTL)
	out := held.returnedAt()
	if localDeadline.Before(out) {
		out = localDeadline // past the local deadline the lease may expire anyway
	}
	if deleted.Before(out) || bTerm.Started().Before(out) {
		t.Fatalf("key deleted %v and successor started %v relative to min(callback returned, local deadline); both must come after",
			deleted.Sub(out), bTerm.Started().Sub(out))
	}
	t.Logf("term ended → callback returned %v; key deleted %v after min(callback returned, local deadline)",
		held.returnedAt().Sub(mustEnded(t, aTerm)), deleted.Sub(out))
}

// waitSessionLost waits until el has no live session (its lease's local deadline minus the safety
// margin has passed), and a moment more for its watchdog to act on it.
func waitSessionLost(t *testing.T, el *election.Elector, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		if _, ok := el.SessionValidUntil(); !ok {
			time.Sleep(300 * time.Millisecond)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the session was still live after %v cut off from etcd", limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
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

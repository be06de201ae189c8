package election_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
)

// Invariant 1 across many graceful handovers: one leader at a time, and the successor's term never
// starts before the predecessor's term context is done.
func TestHandoversNeverOverlap(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprintf("%d candidates", n), func(t *testing.T) {
			c := etcdx.Start(t, etcdx.Options{})
			l := newLedger()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			const rounds = 80
			var handovers atomic.Int64
			var leaders atomic.Int32
			var wg sync.WaitGroup
			for i := range n {
				cand := newCandidate(t, c, fmt.Sprintf("node-%d", i), election.Config{})
				wg.Go(func() {
					for handovers.Load() < rounds {
						term, err := cand.el.Campaign(ctx, project, "orders", cand.id)
						if err != nil {
							if ctx.Err() == nil {
								t.Errorf("%s: campaign: %v", cand.id, err)
							}
							return
						}
						if got := leaders.Add(1); got != 1 {
							t.Errorf("%s: %d processes act as leader at once", cand.id, got)
						}
						l.add(term)
						time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond) // the leader's work
						leaders.Add(-1)
						if err := term.Resign(t.Context()); err != nil {
							t.Errorf("%s: resign: %v", cand.id, err)
						}
						if !errors.Is(term.Err(), election.ErrResigned) {
							t.Errorf("%s: resigned term ended with %v", cand.id, term.Err())
						}
						handovers.Add(1)
					}
					cancel() // wake the candidates still waiting
				})
			}
			wg.Wait()
			terms := l.all()
			if len(terms) < 50 {
				t.Fatalf("only %d terms, want at least 50 handovers", len(terms))
			}
			l.checkNoOverlap(t)
			changes := 0
			for i := 1; i < len(terms); i++ {
				if terms[i].LeaderID() != terms[i-1].LeaderID() {
					changes++
				}
			}
			// A resigning leader may win again when nobody else is waiting yet; the others are handovers.
			if changes < 50 {
				t.Errorf("only %d handovers between processes over %d terms, want at least 50", changes, len(terms))
			}
		})
	}
}

// Run: callbacks in order, and a stopped leader resigns so that a follower takes over in milliseconds
// rather than after the TTL.
func TestRunHandsOverWhenStopped(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	type event struct {
		who, what string
		term      *election.Term
		cause     error
	}
	events := make(chan event, 100)
	var wg sync.WaitGroup
	stops := map[string]context.CancelFunc{}
	observer := etcdx.Client(t, c)
	var prefix string
	ctx, cancel := context.WithCancel(t.Context())
	defer func() { cancel(); wg.Wait() }()
	for i := range 3 {
		cand := newCandidate(t, c, fmt.Sprintf("node-%d", i), election.Config{})
		prefix = cand.el.ElectionKey(project, "invoices")
		rctx, stop := context.WithCancel(ctx)
		stops[cand.id] = stop
		wg.Go(func() {
			err := cand.el.Run(rctx, project, "invoices", cand.id, election.Callbacks{
				OnElected: func(ctx context.Context, term *election.Term) error {
					events <- event{who: cand.id, what: "elected", term: term}
					<-ctx.Done()
					return nil
				},
				OnResign: func(_ context.Context, term *election.Term) {
					events <- event{who: cand.id, what: "resigning", term: term, cause: term.Check()}
				},
				OnStepDown: func(term *election.Term, cause error) {
					events <- event{who: cand.id, what: "stepped down", term: term, cause: cause}
				},
				OnNewLeader: func(l election.Leader) { events <- event{who: cand.id, what: "leader " + l.ID} },
			})
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	var history []event
	// next returns the first event, past or future, after the previous match that satisfies ok.
	seen := 0
	next := func(ok func(event) bool) event {
		t.Helper()
		for {
			for ; seen < len(history); seen++ {
				if ok(history[seen]) {
					seen++
					return history[seen-1]
				}
			}
			select {
			case ev := <-events:
				history = append(history, ev)
			case <-time.After(15 * time.Second):
				t.Fatalf("event not seen; history: %+v", history)
			}
		}
	}
	is := func(what string) func(event) bool { return func(ev event) bool { return ev.what == what } }
	first := next(is("elected"))
	waitCandidates(t, observer, prefix, 3, 10*time.Second)

	stops[first.who]()
	resigning := next(is("resigning"))
	if resigning.who != first.who || resigning.cause != nil {
		t.Fatalf("OnResign must run on %s while its term still holds; got %s with %v", first.who, resigning.who, resigning.cause)
	}
	afterResigning := seen
	down := next(is("stepped down"))
	if down.who != first.who || !errors.Is(down.cause, election.ErrResigned) {
		t.Fatalf("want %s to step down after resigning, got %s: %v", first.who, down.who, down.cause)
	}
	// The successor may be elected before the old leader's OnStepDown runs: OnStepDown reports a term
	// that ended before its key was deleted, and the delete is what lets the successor win. Safety is
	// the term's end before the successor's start, checked below.
	seen = afterResigning
	second := next(func(ev event) bool { return ev.what == "elected" && ev.who != first.who })
	ended, _ := first.term.Ended()
	gap := second.term.Started().Sub(ended)
	if gap <= 0 || gap > 5*time.Second {
		t.Fatalf("handover after a stop took %v; a resign must not wait for the TTL", gap)
	}
	t.Logf("graceful handover %s -> %s in %v", first.who, second.who, gap)
	// The remaining follower is told who leads now.
	seen = 0
	next(func(ev event) bool {
		return ev.what == "leader "+second.who && ev.who != second.who && ev.who != first.who
	})
}

// Invariants 1 and 5 under a partition and under delayed keepalives: the cut-off leader's term ends
// before any other candidate's term starts and before etcd expires its lease; after healing it comes
// back as a follower.
func TestCutOffLeaderStepsDownBeforeExpiry(t *testing.T) {
	const ttl = 2 * time.Second
	faults := []struct {
		name   string
		inject func(p *etcdx.Proxy)
	}{
		{"partition", func(p *etcdx.Proxy) { p.Blackhole() }},
		{"keepalives delayed past the TTL", func(p *etcdx.Proxy) { p.SetDelay(ttl + time.Second) }},
	}
	for _, fault := range faults {
		t.Run(fault.name, func(t *testing.T) {
			c := etcdx.Start(t, etcdx.Options{})
			proxy := etcdx.NewTestProxy(t, c.MemberEndpoint(0))
			cfg := election.Config{TTL: ttl}
			a := newCandidate(t, c, "node-a", cfg, proxy.URL())
			b := newCandidate(t, c, "node-b", cfg)
			observer := etcdx.Client(t, c)
			prefix := a.el.ElectionKey(project, "payments")

			ctx, cancel := context.WithCancel(t.Context())
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			deletes := watchDeletes(t, ctx, observer, prefix, &wg)
			l := newLedger()
			runCandidate(t, ctx, a, "payments", l, &wg)
			aTerm := waitElected(t, l, 10*time.Second)
			runCandidate(t, ctx, b, "payments", l, &wg)
			waitCandidates(t, observer, prefix, 2, 10*time.Second)

			faultAt := time.Now()
			fault.inject(proxy)
			bTerm := waitElected(t, l, 5*ttl)
			if bTerm.LeaderID() != "node-b" {
				t.Fatalf("want node-b to take over, got %s", bTerm.LeaderID())
			}
			expiredSeen := deletes.waitFor(t, aTerm.Key(), 5*ttl)
			aEnded, ok := aTerm.Ended()
			switch {
			case !ok:
				t.Fatal("the cut-off leader's term is still alive while node-b leads")
			case !aEnded.Before(bTerm.Started()):
				t.Fatalf("node-a's term ended %v after node-b's began", aEnded.Sub(bTerm.Started()))
			case !aEnded.Before(expiredSeen):
				t.Fatalf("node-a's term ended %v after etcd expired its lease", aEnded.Sub(expiredSeen))
			case !errors.Is(aTerm.Err(), election.ErrLeaseDeadline):
				t.Fatalf("node-a's term ended with %v, want ErrLeaseDeadline", aTerm.Err())
			case aEnded.Sub(faultAt) > 3*ttl:
				// The ordering above is the safety property; this only catches a watchdog that never fires
				// (a loaded machine may run it late, never out of order).
				t.Fatalf("node-a stepped down %v after the fault, more than 3 × the TTL", aEnded.Sub(faultAt))
			}
			t.Logf("fault→step-down %v, step-down→lease expiry seen %v, step-down→successor %v",
				aEnded.Sub(faultAt), expiredSeen.Sub(aEnded), bTerm.Started().Sub(aEnded))

			proxy.Heal()
			// node-a rejoins as a follower: a fresh candidate key behind node-b's, and no new term.
			waitCandidates(t, observer, prefix, 2, 30*time.Second)
			leader, err := b.el.Leader(t.Context(), project, "payments")
			if err != nil || leader.ID != "node-b" || leader.Token != bTerm.Token() {
				t.Fatalf("after healing, leader = %+v, %v; want node-b at token %d", leader, err, bTerm.Token())
			}
			if bTerm.Err() != nil {
				t.Fatalf("node-b lost its term after node-a rejoined: %v", bTerm.Err())
			}
			l.checkNoOverlap(t)
		})
	}
}

// Invariant 2: a superseded leader's guarded write is refused by etcd itself, even when the leader
// has not yet heard that it lost (its request was in flight while the lease was revoked).
func TestSupersededGuardFails(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	proxy := etcdx.NewTestProxy(t, c.MemberEndpoint(0))
	cfg := election.Config{TTL: 5 * time.Second}
	a := newCandidate(t, c, "node-a", cfg, proxy.URL())
	b := newCandidate(t, c, "node-b", cfg)
	operator := etcdx.Client(t, c)

	aTerm, err := a.el.Campaign(t.Context(), project, "refunds", a.id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := aTerm.Guard(t.Context(), clientv3.OpPut("/fence/fresh", "a")); err != nil {
		t.Fatalf("a live term's guarded write failed: %v", err)
	}
	bTerms := make(chan *election.Term, 1)
	go func() {
		term, err := b.el.Campaign(t.Context(), project, "refunds", b.id)
		if err != nil {
			t.Errorf("node-b campaign: %v", err)
			close(bTerms)
			return
		}
		bTerms <- term
	}()
	waitCandidates(t, operator, a.el.ElectionKey(project, "refunds"), 2, 10*time.Second)

	proxy.SetDelay(time.Second)
	type result struct {
		resp *clientv3.TxnResponse
		err  error
		at   time.Time
	}
	guarded := make(chan result, 1)
	go func() {
		resp, err := aTerm.Guard(t.Context(), clientv3.OpPut("/fence/stale", "a"))
		guarded <- result{resp, err, time.Now()}
	}()
	lease := leaseOf(t, operator, aTerm.Key())
	if _, err := operator.Revoke(t.Context(), lease); err != nil {
		t.Fatal(err)
	}
	bTerm := <-bTerms
	if bTerm == nil {
		t.FailNow()
	}
	res := <-guarded
	if !errors.Is(res.err, election.ErrNotLeader) {
		t.Fatalf("stale guarded write returned %v, want ErrNotLeader", res.err)
	}
	if res.resp == nil || res.resp.Succeeded {
		t.Fatalf("want etcd to refuse the stale write (Succeeded=false), got %+v, %v", res.resp, res.err)
	}
	if !bTerm.Started().Before(res.at) {
		t.Fatal("the stale write was refused before the successor existed: the test did not exercise supersession")
	}
	resp, err := operator.Get(t.Context(), "/fence/stale")
	if err != nil || resp.Count != 0 {
		t.Fatalf("the superseded leader's write landed: %v %v", resp, err)
	}
	if !errors.Is(aTerm.Err(), election.ErrKeyLost) && !errors.Is(aTerm.Err(), election.ErrSessionLost) {
		t.Fatalf("the superseded term ended with %v", aTerm.Err())
	}
	if _, err := aTerm.Guard(t.Context(), clientv3.OpPut("/fence/later", "a")); !errors.Is(err, election.ErrNotLeader) {
		t.Fatalf("an ended term's Guard = %v, want ErrNotLeader", err)
	}
	if _, err := bTerm.Guard(t.Context(), clientv3.OpPut("/fence/new", "b")); err != nil {
		t.Fatalf("the new leader's guarded write failed: %v", err)
	}
}

func leaseOf(t *testing.T, cli *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get %s: %v %v", key, resp, err)
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// Bad input and a server that is down: clear errors, no panic, no hang.
func TestBadInputAndDownServer(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	a := newCandidate(t, c, "node-a", election.Config{TTL: 2 * time.Second})
	for _, tc := range []struct{ project, queue, field string }{
		{"", "q", "project"}, {"p", "", "queue"}, {"p/x", "q", "project"}, {"p", "q\n", "queue"},
		{"p", strings.Repeat("q", 300), "queue"},
	} {
		_, err := a.el.Campaign(t.Context(), tc.project, tc.queue, "v")
		if !errors.Is(err, election.ErrInvalidName) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Campaign(%q, %q) = %v, want ErrInvalidName naming %s", tc.project, tc.queue, err, tc.field)
		}
	}
	if err := a.el.Run(t.Context(), project, "q", "v", election.Callbacks{}); !errors.Is(err, election.ErrInvalidConfig) {
		t.Errorf("Run without OnElected = %v", err)
	}

	term, err := a.el.Campaign(t.Context(), project, "q", "v")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.el.Campaign(t.Context(), project, "q", "v"); !errors.Is(err, election.ErrAlreadyCampaigning) {
		t.Errorf("a second campaign on a held queue = %v, want ErrAlreadyCampaigning", err)
	}
	if c.External() {
		return
	}
	if err := c.StopMember(0); err != nil {
		t.Fatal(err)
	}
	// With etcd down the term ends by the watchdog, and a campaign gives up with its context.
	select {
	case <-term.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("term outlived an unreachable etcd")
	}
	if !errors.Is(term.Err(), election.ErrSessionLost) {
		t.Errorf("term ended with %v, want ErrSessionLost", term.Err())
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	if _, err := a.el.Campaign(ctx, project, "other", "v"); err == nil {
		t.Fatal("campaign succeeded with etcd down")
	} else {
		t.Logf("campaign with etcd down: %v after %v", err, time.Since(start).Round(time.Millisecond))
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("campaign with etcd down took %v past its 1s context", d)
	}
}

// Restart of etcd on the same data dir: afterwards exactly one leader per queue, never two at once.
func TestEtcdRestartKeepsOneLeaderPerQueue(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	if c.External() {
		t.Skip("BATON_ETCD_ENDPOINTS is set: cannot restart an external etcd")
	}
	queues := []string{"q0", "q1", "q2"}
	cands := []*candidate{
		newCandidate(t, c, "node-a", election.Config{TTL: 2 * time.Second}),
		newCandidate(t, c, "node-b", election.Config{TTL: 2 * time.Second}),
	}
	l := newLedger()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, cand := range cands {
		for _, q := range queues {
			runCandidate(t, ctx, cand, q, l, &wg)
		}
	}
	waitOneLeaderPerQueue(t, l, cands[0], queues, 20*time.Second)
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	waitOneLeaderPerQueue(t, l, cands[0], queues, 30*time.Second)
	l.checkNoOverlap(t)
}

// Loss of 1 of 3 members: no step-down while a quorum stands. Loss of quorum: every leader steps
// down. Recovery: exactly one leader per queue.
func TestMemberAndQuorumLoss(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{Members: 3})
	if c.External() {
		t.Skip("BATON_ETCD_ENDPOINTS is set: cannot stop members of an external etcd")
	}
	const ttl = 5 * time.Second // room for a raft re-election when the stopped member was etcd's leader
	queues := []string{"q0", "q1", "q2"}
	cands := []*candidate{
		newCandidate(t, c, "node-a", election.Config{TTL: ttl}),
		newCandidate(t, c, "node-b", election.Config{TTL: ttl}),
	}
	l := newLedger()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, cand := range cands {
		for _, q := range queues {
			runCandidate(t, ctx, cand, q, l, &wg)
		}
	}
	waitOneLeaderPerQueue(t, l, cands[0], queues, 20*time.Second)
	before := len(l.all())
	live := l.live()

	if err := c.StopMember(0); err != nil {
		t.Fatal(err)
	}
	// Observe for two TTLs: with a quorum standing, nobody may step down.
	time.Sleep(2 * ttl)
	for q, terms := range live {
		if err := terms[0].Err(); err != nil {
			t.Fatalf("queue %s: leader stepped down with a quorum standing: %v", q, err)
		}
	}
	if n := len(l.all()); n != before {
		t.Fatalf("%d new terms while a quorum stood", n-before)
	}

	lostAt := time.Now()
	if err := c.StopMember(1); err != nil {
		t.Fatal(err)
	}
	for q, terms := range live {
		select {
		case <-terms[0].Done():
		case <-time.After(5 * ttl):
			t.Fatalf("queue %s: leader still acting %v after quorum loss", q, time.Since(lostAt))
		}
		if !errors.Is(terms[0].Err(), election.ErrSessionLost) {
			t.Errorf("queue %s: term ended with %v, want ErrSessionLost", q, terms[0].Err())
		}
		ended, _ := terms[0].Ended()
		t.Logf("queue %s: stepped down %v after quorum loss", q, ended.Sub(lostAt).Round(time.Millisecond))
	}
	if err := c.RestartMember(0); err != nil {
		t.Fatal(err)
	}
	if err := c.RestartMember(1); err != nil {
		t.Fatal(err)
	}
	waitOneLeaderPerQueue(t, l, cands[0], queues, 60*time.Second)
	l.checkNoOverlap(t)
}

// waitOneLeaderPerQueue waits until every queue has exactly one live term and etcd names the same
// leader and token.
func waitOneLeaderPerQueue(t *testing.T, l *ledger, any *candidate, queues []string, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		live := l.live()
		ok := true
		var problem string
		for _, q := range queues {
			if len(live[q]) > 1 {
				t.Fatalf("queue %s: %d live terms at once", q, len(live[q]))
			}
			if len(live[q]) != 1 {
				ok, problem = false, "no live term for "+q
				break
			}
			leader, err := any.el.Leader(t.Context(), project, q)
			if err != nil || leader.Token != live[q][0].Token() || leader.ID != live[q][0].LeaderID() {
				ok, problem = false, fmt.Sprintf("etcd shows %+v (%v) for %s, live term %s@%s", leader, err, q,
					live[q][0].LeaderID(), strconv.FormatInt(live[q][0].Token(), 10))
				break
			}
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not exactly one leader per queue within %v: %s", limit, problem)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// A waiting campaign never outlives its session: cut off from etcd, it returns ErrSessionLost once
// the lease deadline passes instead of hanging.
func TestCampaignEndsWithItsSession(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	proxy := etcdx.NewTestProxy(t, c.MemberEndpoint(0))
	cfg := election.Config{TTL: 2 * time.Second}
	a := newCandidate(t, c, "node-a", cfg)
	b := newCandidate(t, c, "node-b", cfg, proxy.URL())
	if _, err := a.el.Campaign(t.Context(), project, "ledger", a.id); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		_, err := b.el.Campaign(t.Context(), project, "ledger", b.id)
		errc <- err
	}()
	waitCandidates(t, etcdx.Client(t, c), a.el.ElectionKey(project, "ledger"), 2, 10*time.Second)
	cut := time.Now()
	proxy.Blackhole()
	select {
	case err := <-errc:
		if !errors.Is(err, election.ErrSessionLost) {
			t.Fatalf("campaign returned %v, want ErrSessionLost", err)
		}
		t.Logf("waiting campaign returned %v after the cut: %v", time.Since(cut).Round(time.Millisecond), err)
	case <-time.After(10 * time.Second):
		t.Fatal("a waiting campaign outlived its session")
	}
}

// A lease revoked behind the leader's back (an operator) ends every term of the session, and the
// followers take over.
func TestRevokedLeaseEndsEveryTerm(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cfg := election.Config{TTL: 5 * time.Second}
	var events recorder
	a := newCandidate(t, c, "node-a", election.Config{TTL: cfg.TTL, Events: events.sink})
	b := newCandidate(t, c, "node-b", cfg)
	operator := etcdx.Client(t, c)
	queues := []string{"q0", "q1", "q2"}
	l := newLedger()
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for _, q := range queues {
		runCandidate(t, ctx, a, q, l, &wg)
	}
	var aTerms []*election.Term
	for range queues {
		aTerms = append(aTerms, waitElected(t, l, 10*time.Second))
	}
	for _, q := range queues {
		runCandidate(t, ctx, b, q, l, &wg)
		waitCandidates(t, operator, a.el.ElectionKey(project, q), 2, 10*time.Second)
	}
	revokedAt := time.Now()
	if _, err := operator.Revoke(t.Context(), leaseOf(t, operator, aTerms[0].Key())); err != nil {
		t.Fatal(err)
	}
	for _, term := range aTerms {
		select {
		case <-term.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: term alive %v after its lease was revoked", term.Queue(), time.Since(revokedAt))
		}
		if !errors.Is(term.Err(), election.ErrKeyLost) && !errors.Is(term.Err(), election.ErrLeaseNotFound) {
			t.Errorf("%s: term ended with %v", term.Queue(), term.Err())
		}
		// The event stream says the same, in its own terms: one start and one end of this term. The
		// end is emitted just after the term's context is cancelled (a sink never delays that).
		var started, ended []event.Event
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if started, ended = events.of(event.TermStarted, term.Queue()), events.of(event.TermEnded, term.Queue()); len(ended) > 0 {
				break
			}
		}
		if len(started) != 1 || len(ended) != 1 {
			t.Fatalf("%s: events %+v %+v, want one TermStarted and one TermEnded", term.Queue(), started, ended)
		}
		s, e := started[0], ended[0]
		if s.Token != term.Token() || e.Token != term.Token() || s.Key != term.Key() || e.Key != term.Key() || s.ServerID != "node-a" ||
			!e.Started.Equal(s.At) || e.At.Before(s.At) || (e.Reason != event.EndedKeyLost && e.Reason != event.EndedSessionLost) || e.Err == "" {
			t.Errorf("%s: term %d (%s) reported as %+v, then %+v", term.Queue(), term.Token(), term.Key(), s, e)
		}
	}
	for range queues {
		if term := waitElected(t, l, 10*time.Second); term.LeaderID() != "node-b" {
			t.Fatalf("want node-b to take over, got %s", term.LeaderID())
		}
	}
	// No overlap check here: a revoke behind the leader's back lets etcd elect a successor before
	// the old leader can hear of it (it learns from its watch or next keepalive, milliseconds later).
	// That case is covered by fencing, not by timing: see TestSupersededGuardFails.
	for _, term := range aTerms {
		if _, err := term.Guard(t.Context()); !errors.Is(err, election.ErrNotLeader) {
			t.Errorf("%s: the revoked leader's Guard = %v, want ErrNotLeader", term.Queue(), err)
		}
	}
}

// A Run term whose key is deleted behind its back (an operator) ends with ErrKeyLost, at every stage
// of the term: while OnElected holds it, after OnElected returned early, and while OnResign hands it
// over. Run follows the key in its own goroutine, switching what it waits for between the stages.
func TestDeletedKeyEndsARunTerm(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	operator := etcdx.Client(t, c)
	const limit = 20 * time.Second // the key's deletion reaches the watch in milliseconds; load may slow it
	for _, stage := range []string{"elected", "returned", "resigning"} {
		t.Run(stage, func(t *testing.T) {
			a := newCandidate(t, c, "node-a", election.Config{ResignTimeout: time.Minute})
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			terms := make(chan *election.Term, 1)
			resigning := make(chan struct{})
			sawInResign := make(chan error, 1)
			stepDown := make(chan error, 1)
			ran := make(chan error, 1)
			go func() {
				ran <- a.el.Run(ctx, project, "deleted-"+stage, a.id, election.Callbacks{
					OnElected: func(tctx context.Context, term *election.Term) error {
						terms <- term
						if stage == "returned" {
							return nil
						}
						<-tctx.Done()
						return nil
					},
					OnResign: func(hctx context.Context, term *election.Term) {
						close(resigning)
						select {
						case <-term.Done():
							sawInResign <- term.Err()
						case <-hctx.Done():
							sawInResign <- hctx.Err()
						}
					},
					OnStepDown: func(_ *election.Term, cause error) {
						select {
						case stepDown <- cause:
						default:
						}
					},
				})
			}()
			var term *election.Term
			select {
			case term = <-terms:
			case <-time.After(limit):
				t.Fatalf("not elected within %v", limit)
			}
			if stage == "resigning" {
				cancel()
				select {
				case <-resigning:
				case <-time.After(limit):
					t.Fatalf("no OnResign within %v of the stop", limit)
				}
			}
			if _, err := operator.Delete(t.Context(), term.Key()); err != nil {
				t.Fatal(err)
			}
			select {
			case <-term.Done():
			case <-time.After(limit):
				t.Fatalf("term alive %v after its key was deleted", limit)
			}
			if !errors.Is(term.Err(), election.ErrKeyLost) {
				t.Fatalf("term ended with %v, want ErrKeyLost", term.Err())
			}
			if stage == "resigning" {
				if err := <-sawInResign; !errors.Is(err, election.ErrKeyLost) {
					t.Fatalf("OnResign saw %v, want the term lost with ErrKeyLost", err)
				}
			}
			select {
			case cause := <-stepDown:
				if !errors.Is(cause, election.ErrKeyLost) {
					t.Fatalf("OnStepDown cause %v, want ErrKeyLost", cause)
				}
			case <-time.After(limit):
				t.Fatal("no OnStepDown")
			}
			cancel()
			if err := <-ran; err != nil {
				t.Fatalf("Run: %v", err)
			}
		})
	}
}

// KeepSession holds a session for a process that campaigns for nothing (a balanced worker that
// stands in no line), and grants a new one when etcd drops the lease.
func TestKeepSessionWithoutCampaigns(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cand := newCandidate(t, c, "idle", election.Config{TTL: 2 * time.Second})
	operator := etcdx.Client(t, c)
	if _, ok := cand.el.SessionValidUntil(); ok {
		t.Fatal("a session before anything asked for one")
	}
	ctx, cancel := context.WithCancel(t.Context())
	kept := make(chan error, 1)
	go func() { kept <- cand.el.KeepSession(ctx) }()
	leases := func() []clientv3.LeaseID {
		resp, err := operator.Leases(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var ids []clientv3.LeaseID
		for _, l := range resp.Leases {
			ids = append(ids, l.ID)
		}
		return ids
	}
	var first clientv3.LeaseID
	harness.Eventually(t, 30*time.Second, "a session without campaigns", func() error {
		if _, ok := cand.el.SessionValidUntil(); !ok {
			return errors.New("no session")
		}
		ids := leases()
		if len(ids) != 1 {
			return fmt.Errorf("leases %v, want one", ids)
		}
		first = ids[0]
		return nil
	})
	if _, err := operator.Revoke(t.Context(), first); err != nil {
		t.Fatal(err)
	}
	harness.Eventually(t, 30*time.Second, "a new session after the lease was revoked", func() error {
		ids := leases()
		if _, ok := cand.el.SessionValidUntil(); !ok || len(ids) != 1 || ids[0] == first {
			return fmt.Errorf("session %v, leases %v (the revoked one: %x)", ok, ids, first)
		}
		return nil
	})
	cancel()
	if err := <-kept; err != nil {
		t.Fatalf("KeepSession after its context ended: %v, want nil", err)
	}
}

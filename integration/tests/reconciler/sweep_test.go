package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// recorder passes the reconciler's Temporal calls to the real client and records them: the run IDs
// it asked to terminate, those Temporal actually terminated, and the page sizes of its listings.
type recorder struct {
	inner  reconciler.Temporal
	before func(opts client.TerminateWorkflowOptions)

	mu         sync.Mutex
	asked      []client.TerminateWorkflowOptions
	terminated []string
	pages      []int32
}

func (r *recorder) ListWorkflow(ctx context.Context, req *workflowservice.ListWorkflowExecutionsRequest) (*workflowservice.ListWorkflowExecutionsResponse, error) {
	r.mu.Lock()
	r.pages = append(r.pages, req.GetPageSize())
	r.mu.Unlock()
	return r.inner.ListWorkflow(ctx, req)
}

func (r *recorder) TerminateWorkflowWithOptions(ctx context.Context, opts client.TerminateWorkflowOptions) error {
	if r.before != nil {
		r.before(opts)
	}
	err := r.inner.TerminateWorkflowWithOptions(ctx, opts)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, opts)
	if err == nil {
		r.terminated = append(r.terminated, opts.RunID+opts.FirstExecutionRunID)
	}
	return err
}

// runIDs returns the run IDs Temporal terminated on the reconciler's request, sorted.
func (r *recorder) runIDs() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(slices.Values(r.terminated))
}

func (r *recorder) calls() []client.TerminateWorkflowOptions {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.asked)
}

// listPages counts the listings of size size (the sweep's pages, not the probe's).
func (r *recorder) listPages(size int32) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.pages {
		if s == size {
			n++
		}
	}
	return n
}

func runIDsOf(runs ...takeover.Run) []string {
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.RunID
	}
	slices.Sort(ids)
	return ids
}

// waitListed waits until Temporal visibility lists want open dispatcher runs of project (it lags).
func (e *env) waitListed(t *testing.T, project string, want int) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("visibility lists %d open runs", want), func() error {
		resp, err := e.tc.ListWorkflow(t.Context(), &workflowservice.ListWorkflowExecutionsRequest{PageSize: 1000,
			Query: fmt.Sprintf("WorkflowId STARTS_WITH %q AND ExecutionStatus = 'Running'", takeover.WorkflowIDPrefix(project))})
		if err != nil {
			return err
		}
		if n := len(resp.GetExecutions()); n != want {
			return fmt.Errorf("%d listed", n)
		}
		return nil
	})
}

// sweeper is a reconciler driven cycle by cycle by the test, under a reconciler term of its own.
type sweeper struct {
	rec  *reconciler.Reconciler
	term *election.Term
	rc   *recorder
}

func (e *env) sweeper(t *testing.T, project string, cfg reconciler.Config) *sweeper {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named("rec-1")
	qel, err := election.New(e.ecli, election.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeElector(t, qel) })
	recEl, err := election.New(e.ecli, election.Config{Prefix: reconciler.DefaultElectionPrefix, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeElector(t, recEl) })
	term, err := recEl.Campaign(t.Context(), project, reconciler.ElectionQueue, "rec-1")
	if err != nil {
		t.Fatal(err)
	}
	rc := &recorder{inner: e.tc}
	cfg.Project, cfg.ServerID, cfg.Prefix, cfg.Logger = project, "rec-1", e.pfx, log
	rec, err := reconciler.New(cfg, e.rdb, rc, qel)
	if err != nil {
		t.Fatal(err)
	}
	return &sweeper{rec: rec, term: term, rc: rc}
}

// take starts a dispatcher run of queue by o's takeover, without heartbeats; with resign its term
// ends at once and leaves the run behind, as a process that went away does.
func (o *owner) take(t *testing.T, project, queue string, resign bool) (*election.Term, takeover.Run) {
	t.Helper()
	term, err := o.el.Campaign(t.Context(), project, queue, o.id)
	if err != nil {
		t.Fatal(err)
	}
	run, err := o.mgr.Take(t.Context(), term)
	if err != nil {
		t.Fatal(err)
	}
	if resign {
		if err := term.Resign(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	return term, run
}

func (e *env) wantStatus(t *testing.T, want enumspb.WorkflowExecutionStatus, what string, runs ...takeover.Run) {
	t.Helper()
	for _, r := range runs {
		if st := e.status(t, r.WorkflowID, r.RunID); st != want {
			t.Fatalf("%s %s/%s is %v, want %v", what, r.WorkflowID, r.RunID, st, want)
		}
	}
}

// Queues that disappear: a process leading queues A and B is restarted with only A in its
// configuration, or the project is scaled to zero and brought back with only A. Nobody campaigns for
// B any more, so the project's reconciler ends exactly B's run, by its run ID, and deletes B's entry;
// A's new owner's run is untouched.
func TestRemovedQueueIsCleanedUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		away bool // every process gone until the entries are stale (scaled to zero), not a quick restart
	}{{"restart", false}, {"scaled to zero and back", true}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			p := project(t)
			hcfg := heartbeat.Config{Interval: 200 * time.Millisecond}
			cfg := reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: time.Second}
			before := e.owner(t, "node-1", election.Config{}, hcfg)
			termA, oldA, stopA := before.lead(t, p, "a")
			termB, runB, stopB := before.lead(t, p, "b")
			keyA, keyB := before.hb.Key(oldA.Owner.Project, oldA.WorkflowID), before.hb.Key(runB.Owner.Project, runB.WorkflowID)
			rec1 := e.reconciler(t, "node-1", p, cfg, nil, nil)
			eventually(t, 30*time.Second, "the first process's reconciler sees both queues live", func() error {
				for _, r := range rec1.reports() {
					if r.Err == nil && r.Active == 2 {
						return nil
					}
				}
				return errors.New("no cycle with both entries active yet")
			})
			for _, r := range rec1.reports() {
				if r.Terminated != 0 || r.Orphans != 0 {
					t.Fatalf("live queues must be left alone: %+v", r)
				}
			}
			// The process goes away: heartbeats stop, terms end, runs and entries stay behind.
			stopA()
			stopB()
			rec1.stop()
			for _, term := range []*election.Term{termA, termB} {
				if err := term.Resign(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			if tc.away {
				e.waitStale(t, keyB, cfg.StaleAfter)
				e.waitStale(t, keyA, cfg.StaleAfter)
			}
			// It comes back with queue A only.
			after := e.owner(t, "node-1", election.Config{}, hcfg)
			_, newA, _ := after.lead(t, p, "a")
			rc := &recorder{inner: e.tc}
			rec2 := e.reconciler(t, "node-1-restarted", p, cfg, rc, nil)
			eventually(t, 30*time.Second, "B's run terminated and its entry deleted", func() error {
				if e.exists(t, keyB) {
					return errors.New("B's entry still exists")
				}
				if st := e.status(t, runB.WorkflowID, runB.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
					return fmt.Errorf("B's run is %v", st)
				}
				for _, r := range rec2.reports() {
					if r.Deleted == 1 {
						return nil
					}
				}
				return errors.New("no cycle reported the delete yet")
			})
			// Two more cycles, so that a wrong termination would have had its chance.
			n := len(rec2.reports())
			eventually(t, 30*time.Second, "two more cycles", func() error {
				if len(rec2.reports()) < n+2 {
					return errors.New("waiting")
				}
				return nil
			})
			if got, want := rc.runIDs(), runIDsOf(runB); !slices.Equal(got, want) {
				t.Fatalf("the reconciler terminated runs %v, want exactly B's %v", got, want)
			}
			for _, c := range rc.calls() {
				if c.RunID+c.FirstExecutionRunID == "" {
					t.Fatalf("a terminate without a run ID: %+v", c)
				}
			}
			e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "A's new owner's run", newA)
			e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "A's old run (its takeover ended it)", oldA)
			if !e.exists(t, keyA) {
				t.Fatal("A's entry is gone")
			}
		})
	}
}

// A reconciler leader that resigned because its Redis does not answer stays out of the election while
// it is still cut off -- its probes keep failing and it never campaigns -- and stands again, and
// cycles, once Redis answers it.
func TestResignedReconcilerStandsAgainOnlyOnceHealed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	proxy := etcdx.NewTestProxy(t, e.redis.Addr())
	opts := e.redis.ClientOptions()
	opts.Addr = proxy.Addr()
	opts.MaxRetries = -1
	// A refused call ends at the reconciler's CallTimeout, not at go-redis's 3s read timeout.
	opts.ContextTimeoutEnabled = true
	cut := redis.NewClient(opts)
	t.Cleanup(func() { _ = cut.Close() })
	var pingsOK, pingsFailed atomic.Int64
	cut.AddHook(pingCounter{ok: &pingsOK, failed: &pingsFailed})
	cfg := reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: 500 * time.Millisecond, CallTimeout: time.Second}
	sick := e.reconcilerOn(t, cut, "rec-sick", p, cfg, nil, nil)

	obs, err := election.New(e.ecli, election.Config{Prefix: reconciler.DefaultElectionPrefix, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeElector(t, obs) })
	leader := func() (string, error) {
		l, err := obs.Leader(t.Context(), p, reconciler.ElectionQueue)
		return l.ID, err
	}
	eventually(t, 30*time.Second, "rec-sick leads and cycles", func() error {
		if id, err := leader(); err != nil || id != "rec-sick" {
			return fmt.Errorf("leader %q, %v", id, err)
		}
		for _, r := range sick.reports() {
			if r.Err == nil {
				return nil
			}
		}
		return errors.New("no successful cycle yet")
	})

	proxy.Blackhole()
	eventually(t, 60*time.Second, "rec-sick resigns", func() error {
		if _, err := leader(); !errors.Is(err, election.ErrNoLeader) {
			return fmt.Errorf("the election still has a leader (%v)", err)
		}
		return nil
	})
	cycles := len(sick.reports())
	// From now on, any candidate key written under the reconciler election is a violation.
	get, err := e.ecli.Get(t.Context(), "x")
	if err != nil {
		t.Fatal(err)
	}
	var puts atomic.Int64
	wctx, wcancel := context.WithCancel(t.Context())
	wch := e.ecli.Watch(wctx, obs.ElectionKey(p, reconciler.ElectionQueue), clientv3.WithPrefix(),
		clientv3.WithRev(get.Header.Revision+1), clientv3.WithFilterDelete())
	var wg sync.WaitGroup
	wg.Go(func() {
		for resp := range wch {
			puts.Add(int64(len(resp.Events)))
		}
	})
	t.Cleanup(func() { wcancel(); wg.Wait() })
	failed0 := pingsFailed.Load()
	eventually(t, 60*time.Second, "two more probes refused while cut off", func() error {
		if n := pingsFailed.Load() - failed0; n < 2 {
			return fmt.Errorf("%d refused probes", n)
		}
		return nil
	})
	if n := puts.Load(); n != 0 {
		t.Fatalf("rec-sick campaigned %d times while its Redis was cut off", n)
	}
	if _, err := leader(); !errors.Is(err, election.ErrNoLeader) {
		t.Fatalf("the reconciler election has a leader while the only candidate is cut off: %v", err)
	}
	if n := len(sick.reports()); n != cycles {
		t.Fatalf("rec-sick ran %d cycles while out of the election", n-cycles)
	}

	ok0 := pingsOK.Load()
	proxy.Heal()
	eventually(t, 60*time.Second, "rec-sick stands again and cycles", func() error {
		if id, err := leader(); err != nil || id != "rec-sick" {
			return fmt.Errorf("leader %q, %v", id, err)
		}
		for _, r := range sick.reports()[cycles:] {
			if r.Err == nil {
				return nil
			}
		}
		return errors.New("no successful cycle since the heal yet")
	})
	if pingsOK.Load() == ok0 {
		t.Fatal("rec-sick stood again without a PING answered")
	}
}

// pingCounter counts the PINGs a client sent, by outcome: the reconciler's probe is the only PING.
type pingCounter struct{ ok, failed *atomic.Int64 }

func (pingCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c pingCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if cmd.Name() == "ping" {
			if err != nil {
				c.failed.Add(1)
			} else {
				c.ok.Add(1)
			}
		}
		return err
	}
}

func (pingCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// The sweep reads every page of the visibility listing: with pages of 3, one cycle over 8 orphaned
// runs and 2 live leaders' runs ends exactly the 8 orphans.
func TestSweepReadsEveryPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{})
	s := e.sweeper(t, p, reconciler.Config{SweepPageSize: 3, TerminateRate: 1000, TerminateBurst: 100})
	var orphans, live []takeover.Run
	for i := range 10 {
		_, run := a.take(t, p, fmt.Sprintf("q%02d", i), i%5 != 2)
		if i%5 == 2 {
			live = append(live, run)
		} else {
			orphans = append(orphans, run)
		}
	}
	e.waitListed(t, p, 10)
	rep, err := s.rec.Cycle(t.Context(), s.term)
	if err != nil {
		t.Fatalf("cycle: %v", err)
	}
	if pages := s.rc.listPages(3); pages < 4 {
		t.Fatalf("the sweep read %d pages of 3 over 10 open runs, want at least 4", pages)
	}
	if rep.Orphans != 8 || rep.Open != 10 {
		t.Fatalf("one cycle: %d orphans of %d open runs, want 8 of 10: %+v", rep.Orphans, rep.Open, rep)
	}
	if got, want := s.rc.runIDs(), runIDsOf(orphans...); !slices.Equal(got, want) {
		t.Fatalf("terminated %v, want exactly the orphans %v", got, want)
	}
	e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "orphan", orphans...)
	e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "live leader's run", live...)
}

// A queue whose leader has a newer token than a listed run's owner, and whose run is another one (or
// none yet): the listed run is terminated by its run ID, and the leader's own run is never touched --
// even when the leader starts it between the sweep's listing and its terminate.
func TestSweepEndsTheOldRunOfANewerLeaderByRunID(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	old := e.owner(t, "node-old", election.Config{}, heartbeat.Config{})
	nw := e.owner(t, "node-new", election.Config{}, heartbeat.Config{})
	s := e.sweeper(t, p, reconciler.Config{})
	// q1: the new leader has not taken over yet. q2: it takes over while the sweep is about to
	// terminate the old run.
	_, oldQ1 := old.take(t, p, "q1", true)
	_, oldQ2 := old.take(t, p, "q2", true)
	termQ1, err := nw.el.Campaign(t.Context(), p, "q1", nw.id)
	if err != nil {
		t.Fatal(err)
	}
	termQ2, err := nw.el.Campaign(t.Context(), p, "q2", nw.id)
	if err != nil {
		t.Fatal(err)
	}
	if termQ1.Token() <= oldQ1.Owner.Token || termQ2.Token() <= oldQ2.Owner.Token {
		t.Fatalf("the new terms' tokens (%d, %d) are not newer than the old runs' (%d, %d)",
			termQ1.Token(), termQ2.Token(), oldQ1.Owner.Token, oldQ2.Owner.Token)
	}
	var newQ2 takeover.Run
	s.rc.before = func(opts client.TerminateWorkflowOptions) {
		if opts.WorkflowID != oldQ2.WorkflowID || newQ2.RunID != "" {
			return
		}
		run, err := nw.mgr.Take(t.Context(), termQ2)
		if err != nil {
			t.Errorf("take q2: %v", err)
		}
		newQ2 = run
	}
	e.waitListed(t, p, 2)
	rep, err := s.rec.Cycle(t.Context(), s.term)
	if err != nil {
		t.Fatalf("cycle: %v", err)
	}
	if newQ2.RunID == "" {
		t.Fatal("the sweep never tried to terminate q2's old run")
	}
	calls := s.rc.calls()
	if len(calls) != 2 {
		t.Fatalf("the sweep made %d terminate calls, want 2: %+v", len(calls), calls)
	}
	for _, c := range calls {
		if c.RunID != oldQ1.RunID && c.RunID != oldQ2.RunID {
			t.Fatalf("a terminate not naming an old run's ID: %+v", c)
		}
	}
	if rep.Orphans != 1 { // q2's old run was already closed by the takeover
		t.Fatalf("orphans %d, want 1: %+v", rep.Orphans, rep)
	}
	if got, want := s.rc.runIDs(), runIDsOf(oldQ1); !slices.Equal(got, want) {
		t.Fatalf("the reconciler terminated %v, want q1's old run %v", got, want)
	}
	e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "old run", oldQ1, oldQ2)
	e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "the new leader's run", newQ2)

	// The leader of q1 takes over too; later sweeps leave both leaders' runs alone.
	newQ1, err := nw.mgr.Take(t.Context(), termQ1)
	if err != nil {
		t.Fatal(err)
	}
	e.waitListed(t, p, 2)
	if _, err := s.rec.Cycle(t.Context(), s.term); err != nil {
		t.Fatalf("cycle: %v", err)
	}
	if n := len(s.rc.calls()); n != 2 {
		t.Fatalf("a sweep over the leaders' own runs made %d more terminate calls", n-2)
	}
	e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "the new leader's run", newQ1, newQ2)
}

// Terminations are rate-limited: with a burst of 3 and a rate that adds no token within the cycle's
// deadline, a cycle over 8 orphaned runs terminates exactly 3 of them (counted by run ID), and the
// next cycle none; the others stay running for later cycles. A cycle the limit stops is not
// reported as a lost term.
func TestSweepTerminationsAreRateLimited(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{})
	s := e.sweeper(t, p, reconciler.Config{TerminateRate: 0.001, TerminateBurst: 3})
	var orphans []takeover.Run
	for i := range 8 {
		_, run := a.take(t, p, fmt.Sprintf("q%d", i), true)
		orphans = append(orphans, run)
	}
	e.waitListed(t, p, 8)
	for range 2 {
		// The limiter refuses at once a wait past the deadline (1000s for the next token here).
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		_, err := s.rec.Cycle(ctx, s.term)
		cancel()
		if err == nil {
			t.Fatal("a cycle with more orphans than terminations allowed reported success")
		}
		if errors.Is(err, reconciler.ErrNotLeader) {
			t.Fatalf("a cycle stopped by the rate limit, its term alive, reported a lost term: %v", err)
		}
	}
	got := s.rc.runIDs()
	if len(got) != 3 {
		t.Fatalf("two cycles terminated %d runs %v, want the burst of 3", len(got), got)
	}
	var running []takeover.Run
	for _, r := range orphans {
		if slices.Contains(got, r.RunID) {
			e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "terminated orphan", r)
		} else {
			running = append(running, r)
		}
	}
	if len(running) != 5 {
		t.Fatalf("terminated run IDs %v are not the orphans'", got)
	}
	e.wantStatus(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "orphan past the rate", running...)
}

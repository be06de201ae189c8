package reconciler_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/tests/testkit"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// One Temporal server for the package: every test uses queues of its own. etcd and Redis are started
// per test, since tests stop and restart them. So every test runs in parallel with the others (two at
// a time by default: -parallel is GOMAXPROCS), and the production-defaults test's minute of waiting for
// its cycle overlaps the rest of the package.
var temporalServer *temporalx.Server

func TestMain(m *testing.M) { testkit.TemporalMain(m, temporalx.Options{}, &temporalServer) }

// env is one test's servers and clients.
type env struct {
	etcd  *etcdx.Cluster
	redis *redisx.Server
	rdb   redis.UniversalClient
	tc    client.Client
	ecli  *clientv3.Client
	pfx   string
}

func newEnv(t *testing.T) *env {
	t.Helper()
	e := &env{etcd: etcdx.Start(t, etcdx.Options{}), redis: redisx.Start(t, redisx.Options{})}
	e.rdb = redisx.Client(t, e.redis)
	e.tc = temporalx.Client(t, temporalServer)
	e.ecli = etcdx.Client(t, e.etcd)
	e.pfx = redisx.Prefix(t) + heartbeat.DefaultPrefix
	return e
}

// projects counts the projects handed out in this test binary.
var projects atomic.Int64

// project is unique per test, so tests sharing the Temporal server never meet, also when they run in
// parallel (the counter) and across runs against a kept server (the time).
func project(t *testing.T) string {
	return fmt.Sprintf("p%d-%d", time.Now().UnixNano()%1e12, projects.Add(1))
}

// owner is one simulated worker process owning queues: its own etcd client (through a proxy that can
// cut it), Elector, takeover Manager and heartbeat Writer.
type owner struct {
	env   *env
	id    string
	proxy *etcdx.Proxy
	el    *election.Elector
	mgr   *takeover.Manager
	hb    *heartbeat.Writer
}

func (e *env) owner(t *testing.T, id string, ecfg election.Config, hcfg heartbeat.Config) *owner {
	t.Helper()
	proxy := etcdx.NewTestProxy(t, e.etcd.Endpoints()[0])
	cli := etcdx.Client(t, e.etcd, proxy.URL())
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(id)
	ecfg.Logger = log
	el, err := election.New(cli, ecfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeElector(t, el) })
	mgr, err := takeover.New(e.tc, takeover.Config{Logger: log, StepDown: takeover.LeaveRunning})
	if err != nil {
		t.Fatal(err)
	}
	hcfg.Prefix, hcfg.Logger = e.pfx, log
	hb, err := heartbeat.NewWriter(e.rdb, hcfg)
	if err != nil {
		t.Fatal(err)
	}
	return &owner{env: e, id: id, proxy: proxy, el: el, mgr: mgr, hb: hb}
}

func closeElector(t *testing.T, el *election.Elector) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 10*time.Second)
	defer cancel()
	_ = el.Close(ctx)
}

// lead campaigns, takes the dispatcher over and keeps heartbeating in the background until the
// returned stop is called (which does no cleanup: a crash leaves everything behind). It returns once
// the dispatcher's heartbeat entry exists.
func (o *owner) lead(t *testing.T, project, queue string) (*election.Term, takeover.Run, func()) {
	t.Helper()
	term, err := o.el.Campaign(t.Context(), project, queue, o.id)
	if err != nil {
		t.Fatalf("%s: campaign: %v", o.id, err)
	}
	run, err := o.mgr.Take(t.Context(), term)
	if err != nil {
		t.Fatalf("%s: take: %v", o.id, err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _ = o.hb.Run(ctx, term, run) })
	stop := sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(stop)
	o.env.waitKey(t, o.hb.Key(run.Owner.Project, run.WorkflowID))
	return term, run, stop
}

// abandon makes o the queue's owner, then leaves as a process that goes away does: its heartbeats
// stop and its term is resigned, while its dispatcher run and heartbeat entry stay behind. It
// returns the run and the entry's key.
func (o *owner) abandon(t *testing.T, project, queue string) (takeover.Run, string) {
	t.Helper()
	term, run, stop := o.lead(t, project, queue)
	stop()
	if err := term.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	return run, o.hb.Key(run.Owner.Project, run.WorkflowID)
}

// reconcilerNode is a process running the project's reconciler: its own Elector for the reconciler
// election, the queue Elector of a follower for leader lookups.
type reconcilerNode struct {
	id    string
	el    *election.Elector
	rec   *reconciler.Reconciler
	stop  func()
	mu    sync.Mutex
	cycle []reconciler.Report
}

func (e *env) reconciler(t *testing.T, id, project string, cfg reconciler.Config, tc reconciler.Temporal, leaders reconciler.Leaders) *reconcilerNode {
	t.Helper()
	return e.reconcilerOn(t, e.rdb, id, project, cfg, tc, leaders)
}

// reconcilerOn is reconciler with its own Redis client (one behind a proxy that a test cuts).
func (e *env) reconcilerOn(t *testing.T, rdb redis.UniversalClient, id, project string, cfg reconciler.Config, tc reconciler.Temporal, leaders reconciler.Leaders) *reconcilerNode {
	t.Helper()
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(id)
	cli := etcdx.Client(t, e.etcd)
	el, err := election.New(cli, election.Config{Prefix: reconciler.DefaultElectionPrefix, TTL: 2 * time.Second, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closeElector(t, el) })
	if leaders == nil {
		qel, err := election.New(cli, election.Config{Logger: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeElector(t, qel) })
		leaders = qel
	}
	if tc == nil {
		tc = e.tc
	}
	cfg.Project, cfg.ServerID, cfg.Prefix, cfg.Logger = project, id, e.pfx, log
	rec, err := reconciler.New(cfg, rdb, tc, leaders)
	if err != nil {
		t.Fatal(err)
	}
	n := &reconcilerNode{id: id, el: el, rec: rec}
	rec.OnCycle(func(r reconciler.Report) {
		n.mu.Lock()
		n.cycle = append(n.cycle, r)
		n.mu.Unlock()
	})
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := rec.Run(ctx, el); err != nil {
			t.Errorf("%s: reconciler Run: %v", id, err)
		}
	})
	n.stop = sync.OnceFunc(func() { cancel(); wg.Wait() })
	t.Cleanup(n.stop)
	return n
}

func (n *reconcilerNode) reports() []reconciler.Report {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]reconciler.Report(nil), n.cycle...)
}

func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	harness.Eventually(t, d, what, f)
}

func (e *env) status(t *testing.T, id, runID string) enumspb.WorkflowExecutionStatus {
	t.Helper()
	resp, err := e.tc.DescribeWorkflowExecution(t.Context(), id, runID)
	if err != nil {
		t.Fatalf("describe %s/%s: %v", id, runID, err)
	}
	return resp.GetWorkflowExecutionInfo().GetStatus()
}

func (e *env) exists(t *testing.T, key string) bool {
	t.Helper()
	n, err := e.rdb.Exists(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// waitKey waits for the owner's first heartbeat at key.
func (e *env) waitKey(t *testing.T, key string) {
	t.Helper()
	eventually(t, 5*time.Second, "first heartbeat", func() error {
		if !e.exists(t, key) {
			return fmt.Errorf("no heartbeat key %s", key)
		}
		return nil
	})
}

// waitStale waits until the entry at key is older than age by Redis server time.
func (e *env) waitStale(t *testing.T, key string, age time.Duration) {
	t.Helper()
	eventually(t, 10*time.Second, "the entry turns stale", func() error {
		now, err := e.rdb.Time(t.Context()).Result()
		if err != nil {
			return err
		}
		fields, err := e.rdb.HGetAll(t.Context(), key).Result()
		if err != nil {
			return err
		}
		entry, err := heartbeat.Decode(e.pfx, key, fields)
		if err != nil {
			return err
		}
		if a := entry.Age(now); a <= age {
			return fmt.Errorf("age %v", a)
		}
		return nil
	})
}

// watchLeaseExpiry returns a channel closed when key is deleted in etcd (observed on a separate
// client: the server's own expiry of the lease).
func (e *env) watchDelete(t *testing.T, key string) <-chan struct{} {
	t.Helper()
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(t.Context())
	wch := e.ecli.Watch(ctx, key, clientv3.WithFilterPut())
	var wg sync.WaitGroup
	wg.Go(func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					close(done)
					return
				}
			}
		}
	})
	t.Cleanup(func() { cancel(); wg.Wait() })
	return done
}

package node_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// heard is what one process's leadership listener was told, in order.
type heard struct {
	mu      sync.Mutex
	events  []string
	leads   []baton.Lead
	ctxs    []context.Context
	stopped []error
}

func (h *heard) listener() baton.Listener {
	return baton.Listener{
		OnStartedLeading: func(ctx context.Context, l baton.Lead) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, "start")
			h.leads, h.ctxs = append(h.leads, l), append(h.ctxs, ctx)
		},
		OnStoppedLeading: func(_ string, cause error) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, "stop")
			h.stopped = append(h.stopped, cause)
		},
		OnNewLeader: func(_ string, l election.Leader) {
			h.mu.Lock()
			defer h.mu.Unlock()
			h.events = append(h.events, "leader "+l.ID)
		},
	}
}

// startStop returns the start and stop events heard, in order (leader changes are advisory and not
// ordered against them).
func (h *heard) startStop() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(h.events), func(e string) bool { return e != "start" && e != "stop" })
}

func (h *heard) sawLeader(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Contains(h.events, "leader "+id) {
		return fmt.Errorf("no leader %s among %q", id, h.events)
	}
	return nil
}

func (h *heard) wait(t *testing.T, what string, want ...string) {
	t.Helper()
	eventually(t, 60*time.Second, what, func() error {
		if got := h.startStop(); !slices.Equal(got, want) {
			return fmt.Errorf("heard %q, want %q", got, want)
		}
		return nil
	})
}

// listeningNode starts a Node over cli that tells h its leadership events.
func (e *env) listeningNode(t *testing.T, cfg baton.Config, cli *clientv3.Client, h *heard, heal func()) *baton.Node {
	t.Helper()
	cfg.Logger = zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(cfg.ServerID)
	node, err := baton.New(cfg, cli, e.tc, e.rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Listen(h.listener()); err != nil {
		t.Fatal(err)
	}
	if err := node.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := node.Listen(baton.Listener{}); !errors.Is(err, baton.ErrStarted) {
		t.Fatalf("Listen after Start = %v, want ErrStarted", err)
	}
	t.Cleanup(func() {
		heal()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 20*time.Second)
		defer cancel()
		if err := node.Stop(ctx); err != nil {
			t.Error(err)
		}
	})
	return node
}

// Leadership events through a graceful handover and a crash, on real servers with 2 s terms: each
// process hears its own start (token, run, live term) and stop (with the cause), and every process
// hears the new leaders. The Fx app's listener comes from the value group. The live term fences the
// application's own etcd writes: its Guard commits while the term holds and refuses once it ended.
func TestLeadershipEventsThroughHandoverAndCrash(t *testing.T) {
	e := newEnv(t)
	p := project()
	const queue = "orders"
	guarded := "/app/" + p + "/guarded"

	ha := &heard{}
	var a *baton.Node
	appA := fxtest.New(t, fx.NopLogger,
		fx.Supply(fast(p, "node-a", queue), e.cc, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named("node-a")),
		fxmodule.Clients, fxmodule.Module,
		fx.Provide(fxmodule.AsListener(ha.listener)),
		fx.Populate(&a))
	appA.RequireStart()
	ha.wait(t, "node-a hears it leads", "start")
	ha.mu.Lock()
	leadA, ctxA := ha.leads[0], ha.ctxs[0]
	ha.mu.Unlock()
	if leadA.Queue != queue || leadA.Token <= 0 || leadA.Run.RunID == "" || leadA.Term.Token() != leadA.Token || ctxA.Err() != nil {
		t.Fatalf("node-a's lead %+v, ctx err %v", leadA, ctxA.Err())
	}
	if !a.IsLeading(queue) || a.IsLeading("unknown") {
		t.Fatal("IsLeading disagrees with the start event")
	}
	termA, ok := a.Term(queue)
	if !ok || termA != leadA.Term {
		t.Fatalf("Term(%s) = %v %v, want the announced term", queue, termA, ok)
	}
	if qs, _ := leading(a, queue); qs.RunID != leadA.Run.RunID || qs.Token != leadA.Token {
		t.Fatalf("status %+v, lead %+v", qs, leadA)
	}
	if resp, err := termA.Guard(t.Context(), clientv3.OpPut(guarded, "a")); err != nil || !resp.Succeeded {
		t.Fatalf("a write guarded by the live term: %v", err)
	}
	eventually(t, 30*time.Second, "node-a hears itself as leader", func() error { return ha.sawLeader("node-a") })

	// node-b runs behind a proxy that the crash cuts.
	proxy := etcdx.NewTestProxy(t, e.etcd.Endpoints()[0])
	hb := &heard{}
	b := e.listeningNode(t, fast(p, "node-b", queue), etcdx.Client(t, e.etcd, proxy.URL()), hb, proxy.Heal)
	eventually(t, 30*time.Second, "node-b hears node-a lead", func() error { return hb.sawLeader("node-a") })

	// Graceful handover: node-a's app stops.
	appA.RequireStop()
	ha.wait(t, "node-a hears it stopped", "start", "stop")
	ha.mu.Lock()
	causeA := ha.stopped[0]
	ha.mu.Unlock()
	if !errors.Is(causeA, election.ErrResigned) || ctxA.Err() == nil {
		t.Fatalf("node-a stopped with cause %v, term context %v; want ErrResigned and a cancelled context", causeA, ctxA.Err())
	}
	hb.wait(t, "node-b hears it leads", "start")
	hb.mu.Lock()
	leadB := hb.leads[0]
	hb.mu.Unlock()
	if leadB.Token <= leadA.Token || leadB.Run.RunID == leadA.Run.RunID {
		t.Fatalf("successor's lead %+v after %+v", leadB, leadA)
	}
	if resp, err := termA.Guard(t.Context(), clientv3.OpPut(guarded, "late a")); err == nil && resp.Succeeded {
		t.Fatal("the ended term's Guard committed a write")
	}
	if a.IsLeading(queue) {
		t.Fatal("a stopped node reports it leads")
	}

	hc := &heard{}
	c := e.listeningNode(t, fast(p, "node-c", queue), etcdx.Client(t, e.etcd), hc, func() {})
	eventually(t, 30*time.Second, "node-c hears node-b lead", func() error { return hc.sawLeader("node-b") })

	// Crash: node-b is cut off from etcd; its own watchdog ends the term and node-c takes over.
	proxy.Blackhole()
	hb.wait(t, "node-b hears it stopped", "start", "stop")
	hb.mu.Lock()
	causeB := hb.stopped[0]
	hb.mu.Unlock()
	if !errors.Is(causeB, election.ErrSessionLost) {
		t.Fatalf("node-b stopped with cause %v, want a lost session", causeB)
	}
	if b.IsLeading(queue) {
		t.Fatal("a cut-off node reports it leads")
	}
	hc.wait(t, "node-c hears it leads", "start")
	hc.mu.Lock()
	leadC := hc.leads[0]
	hc.mu.Unlock()
	if leadC.Token <= leadB.Token || !c.IsLeading(queue) {
		t.Fatalf("node-c's lead %+v after %+v", leadC, leadB)
	}
	eventually(t, 30*time.Second, "node-c hears itself as leader", func() error { return hc.sawLeader("node-c") })
}

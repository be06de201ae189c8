package sim

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// The probes a node batch must hit.
const (
	ProbeNodeStopHandedOver = "graceful stop handed a queue to a successor"
	ProbeNodeRollout        = "rolling deploy completed"
	ProbeNodeCrashTakenOver = "crashed owner's run closed by its successor's takeover"
	ProbeNodeDrainMoved     = "drained worker handed a queue over"
	ProbeNodeEvicted        = "dead worker evicted from the registry by a queue's leader"
	ProbeNodeTransferred    = "operator's transfer moved a queue to the worker it named"
)

// NodeProbes are the probes of TestSimNode.
var NodeProbes = []string{ProbeNodeStopHandedOver, ProbeNodeRollout, ProbeNodeCrashTakenOver, ProbeNodeDrainMoved, ProbeNodeEvicted, ProbeNodeTransferred}

// NodeWorld is one schedule of the node simulator: 3-5 processes, each a whole baton.Node (baton.New
// and Node.Start: balance, the queues' and the reconciler's elections, takeover with its etcd run
// log, heartbeat, reconciler, registry, all wired by the root package) on the process's seeded
// clock, over its own clientv3 on the etcd model, its own go-redis client on the Redis model and a
// Temporal model client behind the world's Temporal network (modelClient), serving 2-8 queues.
//
// It is the reconciler world's servers, network, scheduler and checks with Nodes for processes: it
// embeds ReconcilerWorld (whose own fleet stays empty) and adds the faults only a Node has: a
// graceful stop (Quiesce, then Stop, as a worker on SIGTERM) and a restart, a rolling deploy (each
// process replaced by one of the next version in turn, the old one stopped gracefully), and an
// operator's drain of a worker in the registry (and undrain); a crash cuts the process off from all
// three servers at once.
//
// Invariants, besides the reconciler world's (fenced reconciler terminates, no run of a live term
// closed by it, no heartbeat entry of a live term deleted): at every step at most one live Node acts
// as a queue's owner (Node.Term passes and etcd holds its key at its token); every dispatcher run is
// started by a takeover whose term's key etcd holds at the run's memo token when the start is sent.
// After the heal: every queue's leader has its own run open (memo token = its create revision), no
// run or entry of a queue nobody stands for, and the registry lists exactly the live processes on
// every queue as ONLINE or DRAINING.
type NodeWorld struct {
	*ReconcilerWorld
	fleet[*wnode] // mu: the processes, version, draining

	version  string
	draining map[int]string // the incarnation an operator drained, by slot

	cmu     sync.Mutex
	dead    map[string]bool   // incarnations cut off from every server (crashed)
	stopped map[string]bool   // incarnations stopped gracefully
	handed  map[string]string // queue -> the stopping incarnation that resigned it, until the next takeover
	// requested is the worker each queue's last transfer request names; transfers is the worker its
	// leader is handing it to on such a request (it said so: event.HandingOver, balance.ReasonTransfer)
	requested, transfers map[string]string

	operator *clientv3.Client   // the operator's etcd client: transfer requests
	reg      *registry.Registry // the operator's view of the registry: drains and the final check
}

// RunNode runs the node world for seed in its own synctest bubble; keep keeps the timeline.
func RunNode(t *testing.T, seed uint64, keep bool) Result {
	return runInBubble(t, seed, keep, runNode)
}

func runNode(t *testing.T, seed uint64, keep bool) Result {
	s := Streams{Seed: seed}
	p := drawNodePlan(s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &NodeWorld{ReconcilerWorld: newReconcilerWorld(ctx, t, s, keep, p), version: "v1", draining: map[int]string{},
		dead: map[string]bool{}, stopped: map[string]bool{}, handed: map[string]string{},
		requested: map[string]string{}, transfers: map[string]string{}}
	reg, err := registry.New(w.redis.Client(), registry.Config{Project: Project})
	if err != nil {
		t.Fatal(err)
	}
	w.reg = reg
	w.operator = w.model.NewClient(ctx, "operator")
	defer w.operator.Close()
	w.ownClear = w.steppedDown
	w.launch(p.nodes, w.newNode)
	w.loop(w.start, w)
	w.redis.Close()
	w.flushNotes()
	return w.result(seed, w.start, p)
}

// step holds one owner acting per queue, at every quiescent moment: among the Nodes that are not cut
// off, those stopping gracefully included (they act until they have handed over).
func (w *NodeWorld) step(time.Time) {
	w.mu.Lock()
	live := make([]*wnode, 0, len(w.slots))
	for _, n := range w.nodes {
		if n.node != nil && !n.done {
			live = append(live, n)
		}
	}
	w.mu.Unlock()
	w.cmu.Lock()
	live = slices.DeleteFunc(live, func(n *wnode) bool { return w.dead[n.name] })
	w.cmu.Unlock()
	var claims []acting
	for _, q := range w.queues {
		claims = claims[:0]
		for _, n := range live {
			if t, ok := n.node.Term(q); ok {
				claims = append(claims, acting{n.name, t.Token()})
			}
		}
		if len(claims) < 2 { // the model is asked only when two Nodes pass their local check
			continue
		}
		held := map[int64]bool{}
		for _, kv := range w.model.Prefix(queueCandidates(q)) {
			held[kv.CreateRevision] = true
		}
		claims = slices.DeleteFunc(claims, func(c acting) bool { return !held[c.token] })
		if len(claims) > 1 {
			w.violate("%d Nodes act as the owner of %s at once: %v", len(claims), q, claims)
		}
	}
}

// acting is a Node whose term for a queue passes its local check.
type acting struct {
	name  string
	token int64
}

func (a acting) String() string { return fmt.Sprintf("%s(token=%d)", a.name, a.token) }

// finish holds the reconciler world's promise after the heal, and the registry's: exactly the live
// processes listed on every queue.
func (w *NodeWorld) finish(since time.Duration) {
	w.checkHealed(since)
	w.checkLeaders(since)
	w.mu.Lock()
	want := map[string]bool{}
	for _, n := range w.slots {
		if !n.crashed {
			for _, q := range w.queues {
				want[q+"/"+n.name] = true
			}
		}
	}
	w.mu.Unlock()
	workers, err := w.listRegistry()
	if err != nil {
		w.violate("registry: List after the heal: %v", err)
		return
	}
	for _, wk := range workers {
		k := wk.Queue + "/" + wk.ServerID
		switch listed := wk.Status != registry.StatusOffline; {
		case listed && !want[k]:
			w.violate("registry: %v after the heal, %s is listed %s on %s, and that process is gone", since, wk.ServerID, wk.Status, wk.Queue)
		case !listed && want[k]:
			w.violate("registry: %v after the heal, live %s is listed OFFLINE on %s", since, wk.ServerID, wk.Queue)
		}
		delete(want, k)
	}
	for k := range want {
		w.violate("registry: %v after the heal, live %s is not listed", since, k)
	}
}

// checkLeaders holds that after the heal every queue has a leader (every live process serves every
// queue), and that its Node, live, acts for it with the key's token.
func (w *NodeWorld) checkLeaders(since time.Duration) {
	w.mu.Lock()
	live := map[string]*baton.Node{}
	for _, n := range w.slots {
		if !n.crashed && n.node != nil {
			live[n.name] = n.node
		}
	}
	w.mu.Unlock()
	for _, q := range w.queues {
		l := w.model.Oldest(queueCandidates(q))
		if l == nil {
			w.violate("liveness: %v after the heal, %s has no leader", since, q)
			continue
		}
		node := live[string(l.Value)]
		if node == nil {
			w.violate("liveness: %v after the heal, %s's leader %s is not a live process", since, q, l.Value)
			continue
		}
		if t, ok := node.Term(q); !ok || t.Token() != l.CreateRevision {
			w.violate("liveness: %v after the heal, %s's leader %s (token %d) does not act as its owner", since, q, l.Value, l.CreateRevision)
		}
	}
}

// listRegistry lists every worker of the project, through a fresh client (the operator's may hold a
// connection a Redis outage broke), in pages of nodeListPage: the Redis model's connections are
// unbuffered pipes, on which a pipeline (List reads a page's records in one) larger than what the
// server reads at once waits for ever for a server that waits to write its first reply.
func (w *NodeWorld) listRegistry() ([]registry.Worker, error) {
	reg, err := registry.New(w.redis.Client(), registry.Config{Project: Project})
	if err != nil {
		return nil, err
	}
	var all []registry.Worker
	for cursor := ""; ; {
		page, next, err := reg.List(w.ctx, registry.Filter{}, cursor, nodeListPage)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// nodeListPage is the registry page the world's check lists at once (List reads ahead up to 32).
const nodeListPage = 10

// steppedDown reports whether e's run was ended by its own term's graceful step-down: after which a
// Node clears the entry itself (ownership.Queue.SteppedDown), once its term has ended locally,
// whether or not etcd has yet seen the resign (a window without a raft leader delays it).
func (w *NodeWorld) steppedDown(e heartbeat.Entry) bool {
	for _, r := range w.temporal.Runs(e.WorkflowID) {
		if r.RunID != e.RunID || r.Open() {
			continue
		}
		reason, ok := takeover.ParseReason(r.Reason)
		return ok && reason.Kind == takeover.ReasonSteppedDown && reason.Token == e.Token
	}
	return false
}

// stopFleet stops every live process as a worker stops on SIGTERM.
func (w *NodeWorld) stopFleet() {
	w.mu.Lock()
	for _, n := range w.slots {
		n.graceful = true
	}
	w.mu.Unlock()
	w.stopAll(&w.stage)
}

// event records a Node's event and feeds the probes.
func (w *NodeWorld) event(who string, e event.Event) {
	switch e.Kind {
	case event.TakenOver, event.PriorTerminated, event.HandingOver, event.WorkerEvicted, event.TermEnded:
	default:
		return
	}
	w.note(who, "%s %s token=%d run=%s prior=%s peer=%s/%d reason=%s", e.Kind, e.Queue, e.Token, shortRun(e.RunID),
		shortRun(e.PriorRunID), e.Peer, e.PeerToken, e.Reason)
	w.cmu.Lock()
	dead := w.dead[e.Peer]
	var handed, transferred bool
	switch {
	case e.Kind == event.HandingOver && e.Reason == balance.ReasonTransfer:
		w.transfers[e.Queue] = w.requested[e.Queue]
	case e.Kind == event.TermEnded && e.Reason == event.EndedResigned && w.stopped[who]:
		w.handed[e.Queue] = who
	case e.Kind == event.TakenOver:
		handed = w.handed[e.Queue] != "" && w.handed[e.Queue] != who
		transferred = w.transfers[e.Queue] == who
		delete(w.handed, e.Queue)
		delete(w.transfers, e.Queue)
	}
	w.cmu.Unlock()
	if transferred {
		w.probe(ProbeNodeTransferred)
	}
	switch {
	case handed:
		w.probe(ProbeNodeStopHandedOver)
	case e.Kind == event.PriorTerminated && dead:
		w.probe(ProbeNodeCrashTakenOver)
	case e.Kind == event.HandingOver && e.Reason == balance.ReasonDrain:
		w.probe(ProbeNodeDrainMoved)
	case e.Kind == event.WorkerEvicted:
		w.probe(ProbeNodeEvicted)
	}
}

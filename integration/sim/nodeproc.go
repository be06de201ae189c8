package sim

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.temporal.io/api/serviceerror"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// wnode is one incarnation of a process of the node world: a whole baton.Node over its own clients.
type wnode struct {
	proc
	w    *NodeWorld
	ver  string
	rdb  *redis.Client
	node *baton.Node // under w.mu

	graceful bool // under w.mu: its stop quiesces and hands over, as a worker's on SIGTERM
	done     bool // under w.mu: its Stop returned
}

func (w *NodeWorld) newNode(slot, gen int) *wnode {
	w.mu.Lock()
	ver := w.version
	w.mu.Unlock()
	n := &wnode{w: w, ver: ver}
	n.init(&w.stage, w.ctx, slot, gen)
	w.add(n)
	return n
}

// start builds the Node with baton.New over the incarnation's clients and starts it. The etcd client
// lives on the world's context: a graceful Stop resigns through it after the incarnation's own
// context ended.
func (n *wnode) start() {
	w := n.w
	w.rec.Add(n.name, "start version %s", n.ver)
	n.cli = w.model.NewClient(n.root, n.name)
	n.rdb = w.redis.Client()
	tc := &modelClient{m: &slowList{Client: temporalmodel.NewClient(w.temporal, n.name, w.sender(n.name)), w: w.ReconcilerWorld, who: n.name},
		w: w, who: n.name}
	node, err := baton.New(n.config(), n.cli, tc, n.rdb)
	if err != nil {
		w.violate("%s: baton.New: %v", n.name, err)
		return
	}
	if err := node.Start(n.ctx); err != nil {
		w.violate("%s: Node.Start: %v", n.name, err)
		return
	}
	w.mu.Lock()
	n.node = node
	w.mu.Unlock()
	n.closers = append(n.closers, n.stopNode)
}

// config is the Node's configuration: the reconciler world's timing, the process's seeded clock.
// Progress checks are off: the model has no task queues and answers no queries
// (DescribeTaskQueue, QueryWorkflow), and no worker runs the dispatcher, so every run would look
// stalled for want of pollers.
func (n *wnode) config() baton.Config {
	t := n.w.plan.temporal
	return baton.Config{Project: Project, Queues: n.w.queues, ServerID: n.name, Version: n.ver, Clock: n.clk,
		Election:  election.Config{TTL: electionTTL},
		Takeover:  takeover.Config{AttemptTimeout: recCallTimeout},
		Heartbeat: heartbeat.Config{Interval: recBeat, KeyTTL: recKeyTTL},
		Reconciler: reconciler.Config{Interval: recInterval, StaleAfter: recStaleAfter, SweepPageSize: t.pageSize,
			TerminateRate: t.rate, TerminateBurst: t.burst, CallTimeout: recCallTimeout},
		Registry: registry.Config{HeartbeatInterval: nodeRegistryBeat, Retention: nodeRetention},
		Progress: progress.Config{Disabled: true},
		Events:   func(e event.Event) { n.w.event(n.name, e) },
	}
}

const (
	// nodeRegistryBeat is the registry's heartbeat interval (EvictAfter is three of them).
	nodeRegistryBeat = time.Second
	// nodeRetention keeps OFFLINE registry records a few seconds, not a day: every Redis key is
	// looked at before every script (lookRedis), and a schedule ends dozens of incarnations.
	nodeRetention = 5 * time.Second
)

// stopNode is the incarnation's stop: a graceful one quiesces its runs first, as a worker does on
// SIGTERM; after a crash, Stop only ends the goroutines of a process already cut off.
func (n *wnode) stopNode(ctx context.Context) {
	n.w.mu.Lock()
	node, graceful := n.node, n.graceful
	n.w.mu.Unlock()
	if node == nil {
		return
	}
	if graceful {
		node.Quiesce(ctx)
	}
	err := node.Stop(ctx)
	n.w.note(n.name, "stopped (graceful=%v) err=%v", graceful, err != nil)
	n.w.mu.Lock()
	n.done = true
	n.w.mu.Unlock()
}

// crash cuts the process off from etcd, Redis and Temporal at once and stops it in the background.
func (w *NodeWorld) crash(slot int) {
	n, live := w.current(slot, false)
	if !live {
		return
	}
	w.mark(w.dead, n.name)
	if n.rdb != nil {
		_ = n.rdb.Close()
	}
	w.fleet.crash(slot)
}

// stopGracefully stops the process as a worker stops on SIGTERM (a restart event may bring it back).
func (w *NodeWorld) stopGracefully(slot int) {
	if n, live := w.current(slot, true); live {
		w.mark(w.stopped, n.name)
		w.bg.Go(n.stop)
	}
}

// deploy is one step of rolling deploy f (surge, as the balance world's): the process's next
// incarnation starts at the next version, and its current one stops gracefully. A crashed process
// just comes back at the new version. The last step's stop completes the rollout.
func (w *NodeWorld) deploy(f recFault) {
	w.mu.Lock()
	w.version = fmt.Sprintf("v%d", f.n+2)
	w.mu.Unlock()
	old, live := w.current(f.node, true)
	if !live {
		w.restart(f.node, w.newNode)
		return
	}
	w.mark(w.stopped, old.name)
	w.replace(f.node, w.newNode)
	last := f.node == w.procs()-1
	w.bg.Go(func() {
		old.stop()
		if last {
			w.probe(ProbeNodeRollout)
		}
	})
}

// current is the incarnation of the process in slot and whether it is live; retire marks a live
// one as stopping gracefully (no longer a slot's live process: a restart may replace it).
func (w *NodeWorld) current(slot int, retire bool) (*wnode, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.slots[slot]
	if n.crashed {
		return n, false
	}
	if retire {
		n.crashed, n.graceful = true, true
	}
	return n, true
}

// mark adds name to one of the world's sets of incarnations (dead, stopped).
func (w *NodeWorld) mark(set map[string]bool, name string) {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	set[name] = true
}

// setDrained drains (or undrains) the process in slot on every queue, as an operator's `baton drain`.
func (w *NodeWorld) setDrained(slot int, drained bool) {
	w.mu.Lock()
	n := w.slots[slot]
	gone := n.crashed
	if !gone {
		w.draining[slot] = ""
		if drained {
			w.draining[slot] = n.name
		}
	}
	w.mu.Unlock()
	if gone {
		return
	}
	for _, q := range w.queues {
		var err error
		if drained {
			err = w.reg.Drain(w.ctx, q, n.name)
		} else {
			err = w.reg.Undrain(w.ctx, q, n.name)
		}
		if err != nil {
			w.rec.Add("world", "drain=%v of %s on %s failed: %v", drained, n.name, q, err)
		}
	}
}

// sender is the process's Temporal network (the reconciler world's), cut while the process is dead,
// with the start fencing check (a run is started only while etcd holds the starter's term) and
// takeover's rule that a terminate names the run it ends.
func (w *NodeWorld) sender(who string) temporalmodel.Sender {
	send := w.ReconcilerWorld.sender(who)
	return func(ctx context.Context, req temporalmodel.Request) (any, error) {
		if w.isDead(who) {
			return nil, serviceerror.NewUnavailable("sim: the process crashed")
		}
		switch {
		case req.Verb == temporalmodel.VerbStart:
			w.checkStart(who, req.Start)
		case req.Verb == temporalmodel.VerbTerminate && req.Terminate.RunID == "" && req.Terminate.FirstRunID == "":
			w.violate("%s sent a terminate of %s that names no run: it would end whatever run is current", who, req.Terminate.WorkflowID)
		}
		return send(ctx, req)
	}
}

func (w *NodeWorld) isDead(who string) bool {
	w.cmu.Lock()
	defer w.cmu.Unlock()
	return w.dead[who]
}

// checkStart holds that a dispatcher run leaves for Temporal only while etcd holds its starter's term:
// a candidate key of the run's queue with the memo's token as its create revision, the memo's server
// as its value.
func (w *NodeWorld) checkStart(who string, req *temporalmodel.StartRequest) {
	owner, found, err := takeover.DecodeOwner(w.dc, req.Memo)
	if err != nil || !found {
		w.violate("%s started %s without an owner memo (err %v)", who, req.WorkflowID, err)
		return
	}
	q := w.wfq[req.WorkflowID]
	for _, kv := range w.model.Prefix(queueCandidates(q)) {
		if kv.CreateRevision == owner.Token && string(kv.Value) == owner.ServerID {
			return
		}
	}
	w.violate("%s sent a start of %s at token %d after etcd stopped holding that term", who, q, owner.Token)
}

package sim

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/baton-run/baton/election"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// proc is one incarnation of a process of the election or the balance world: its name, its clock, its
// own clientv3 over the model and a real Elector, and the goroutines it runs.
type proc struct {
	g      *stage
	root   context.Context // the world's: a stop's Close outlives the incarnation's own context
	slot   int
	name   string // server ID and network name
	clk    *nodeClock
	cli    *clientv3.Client
	el     *election.Elector
	ctx    context.Context
	cancel context.CancelFunc
	runs   sync.WaitGroup
	// closers run once the incarnation's goroutines are gone, before its Elector and client close: a
	// world's other users of the client (a second Elector) close there.
	closers []func(ctx context.Context)

	crashed bool // under the world's mu
}

// init names the gen-th incarnation of the process in slot and gives it its clock and context.
func (p *proc) init(g *stage, root context.Context, slot, gen int) {
	p.g, p.root, p.slot = g, root, slot
	p.name = fmt.Sprintf("n%d.%d", slot, gen)
	p.clk = newNodeClock(g.s, "clock/"+p.name)
	p.ctx, p.cancel = context.WithCancel(root)
}

// elector opens the incarnation's client and its Elector; a failure is a violation (nil).
func (p *proc) elector() *election.Elector {
	p.cli = p.g.model.NewClient(p.ctx, p.name)
	el, err := election.New(p.cli, election.Config{TTL: electionTTL, Clock: p.clk})
	if err != nil {
		p.g.violate("election.New: %v", err)
		return nil
	}
	p.el = el
	return el
}

// stop ends the incarnation: graceful (its terms are handed over) or after a crash (its network is
// cut first, so nothing it says reaches etcd). It returns once every goroutine of the incarnation is gone.
func (p *proc) stop() {
	p.cancel()
	p.runs.Wait()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(p.root), 30*time.Second)
	defer cancel()
	for _, c := range p.closers {
		c(cctx)
	}
	if p.el != nil {
		_ = p.el.Close(cctx)
	}
	if p.cli != nil {
		p.cli.Close()
	}
	p.g.rec.Add(p.name, "stopped")
}

// incarnation is a world's process type (*node, *bnode).
type incarnation interface {
	base() *proc
	start()
}

func (p *proc) base() *proc { return p }

// fleet is the processes of a world that runs real Electors, under mu (which the world also holds
// for what it keeps of their terms).
type fleet[N incarnation] struct {
	mu    sync.Mutex
	nodes []N // every incarnation, live or not
	slots []N // the current incarnation of each process
}

// launch starts the first incarnation of each of count processes.
func (f *fleet[N]) launch(count int, newNode func(slot, gen int) N) {
	for i := range count {
		n := newNode(i, 0)
		f.slots = append(f.slots, n)
		n.start()
	}
}

func (f *fleet[N]) add(n N) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nodes = append(f.nodes, n)
}

// crash cuts a process off at once (nothing it sends arrives) and stops it in the background.
func (f *fleet[N]) crash(slot int) {
	f.mu.Lock()
	p := f.slots[slot].base()
	if p.crashed {
		f.mu.Unlock()
		return
	}
	p.crashed = true
	f.mu.Unlock()
	p.g.net.Cut(p.name, true)
	p.g.bg.Go(p.stop)
}

// restart starts a new incarnation (a new server ID) of a crashed process.
func (f *fleet[N]) restart(slot int, newNode func(slot, gen int) N) {
	f.mu.Lock()
	crashed := f.slots[slot].base().crashed
	f.mu.Unlock()
	if crashed {
		f.replace(slot, newNode)
	}
}

// deploy is one step of a rolling deploy (surge): the process's next incarnation starts, and its
// current one, still checked while it hands its queues over, stops gracefully (its terms resign and
// their callbacks drain). A crashed process just comes back.
func (f *fleet[N]) deploy(slot int, newNode func(slot, gen int) N) {
	f.mu.Lock()
	old := f.slots[slot].base()
	crashed := old.crashed
	f.mu.Unlock()
	if crashed {
		f.restart(slot, newNode)
		return
	}
	f.replace(slot, newNode)
	old.g.bg.Go(old.stop)
}

// replace starts the next incarnation of the process in slot and returns the one it replaced.
func (f *fleet[N]) replace(slot int, newNode func(slot, gen int) N) N {
	f.mu.Lock()
	gen := 0
	for _, n := range f.nodes {
		if n.base().slot == slot {
			gen++
		}
	}
	f.mu.Unlock()
	n := newNode(slot, gen)
	f.mu.Lock()
	old := f.slots[slot]
	f.slots[slot] = n
	f.mu.Unlock()
	n.start()
	return old
}

// slotOf is the slot of the live process whose candidate key kv is.
func (f *fleet[N]) slotOf(kv *mvccpb.KeyValue) (int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for slot, n := range f.slots {
		if p := n.base(); kv != nil && string(kv.Value) == p.name && !p.crashed {
			return slot, true
		}
	}
	return 0, false
}

// procName is the name of the current incarnation of the process in slot.
func (f *fleet[N]) procName(slot int) string { return f.slots[slot].base().name }

// procs is the number of processes (slots).
func (f *fleet[N]) procs() int { return len(f.slots) }

// stopAll stops every live process gracefully and waits for every stop, and for the world's
// background work.
func (f *fleet[N]) stopAll(g *stage) {
	var wg sync.WaitGroup
	f.mu.Lock()
	for _, n := range f.slots {
		if p := n.base(); !p.crashed {
			p.crashed = true // no longer checked: it is handing over
			wg.Go(p.stop)
		}
	}
	f.mu.Unlock()
	wg.Wait()
	g.bg.Wait()
}

package sim

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"github.com/baton-run/baton/ledger"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The probes a ledger batch must hit.
const (
	ProbeLedgerBeginOverOlder = "ledger Begin over an older token's pending record"
	ProbeLedgerLostResponse   = "ledger write applied, its response lost"
	ProbeLedgerRegranted      = "ledger lease lost and a new one granted"
	ProbeLedgerSuperseded     = "superseded owner refused by the ledger"
)

// ledgerOwnerKey is the election key every owner of the simulated queue holds in turn: its create
// revision is the owner's token (as election.Term's key is).
const ledgerOwnerKey = "election/" + Project + "/q"

// ledgerPrefix is the ledger's prefix in the simulator.
const ledgerPrefix = ledger.DefaultPrefix

// LedgerWorld is one schedule of the ledger simulator: the real ledger.Etcd of 2-3 owners with
// increasing tokens over the etcd model. Terms are modelled without an Elector: each owner in turn
// deletes its predecessor's key (ledgerOwnerKey) and creates it again through its own faulty client,
// and the new create revision is its token, as an election.Term's is; a superseded owner keeps
// running its stream. Each owner asks its ledger to Begin, handle and Complete a stream of dispatch
// keys drawn from a small pool (so owners share keys, as a carry-over sends them again), retrying what
// a retry can fix, under the seed's network faults (delay, reorder, drop, lost response), operator
// revokes of the current owner's ledger lease, pauses of its traffic (up to 40 s: past the lease's
// rotation, sometimes past its life), no-leader windows, raft-leader changes and compaction.
//
// Invariants, checked on every record the model commits: the write is fenced (the owner key held the
// writer's token at that revision), a record never goes from done back to pending, and a record is
// completed at most once in its life (a record deleted with its lease starts a new life: the
// documented retention bound). After the heal the last owner must Begin and Complete a fresh key
// within ledgerHealBound: a ledger that cannot write then is wedged (past bug B2). The ledger's Watch follows it all (watchLedger). Not
// covered here: BeginHolding's attempt claims.
type LedgerWorld struct {
	stage
	t    *testing.T
	plan ledgerPlan
	ctx  context.Context

	mu       sync.Mutex
	owners   []*ledgerOwner
	token    int64                // the current owner's token (0: between terms)
	held     map[string]time.Time // until when each owner's traffic is held (the scheduler's alone)
	watchCli *clientv3.Client

	// under rmu (the recorder's side, written under the model's lock: onCommit), with the violations
	records   map[string]ledgerSeen
	lost      map[int64]bool // ledger leases gone (revoked or expired)
	lastLease map[string]int64
	doneAt    map[int64][]string // every done record committed, by revision (a restore without a bump reuses revisions)
}

// ledgerSeen is what the world saw last of a record: its state, writer, and how many done puts it
// had since it was last created.
type ledgerSeen struct {
	state  string
	server string
	token  int64
	lease  int64
	dones  int
	raw    string // the record's value
}

// RunLedger runs the ledger world for seed in its own synctest bubble; keep keeps the timeline.
func RunLedger(t *testing.T, seed uint64, keep bool) Result {
	return runInBubble(t, seed, keep, runLedger)
}

func runLedger(t *testing.T, seed uint64, keep bool) Result {
	s := Streams{Seed: seed}
	p := drawLedgerPlan(s)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	w := &LedgerWorld{t: t, plan: p, ctx: ctx, records: map[string]ledgerSeen{}, lost: map[int64]bool{},
		lastLease: map[string]int64{}, held: map[string]time.Time{}, doneAt: map[int64][]string{}}
	w.setUp(s, keep, p.net, w.onCommit, p)
	start := time.Now()
	for i := range p.owners {
		w.owners = append(w.owners, w.newOwner(i))
	}
	w.bg.Go(w.owners[0].run)
	w.bg.Go(w.watchLedger)
	w.loop(start, cancel)
	return w.result(seed, start, p)
}

// loop is the scheduler, as World.loop: at every quiescent moment it checks, applies the due
// events, and delivers one message; the heal turns the faults off and starts the liveness check.
func (w *LedgerWorld) loop(start time.Time, cancel context.CancelFunc) {
	chaosEnd := start.Add(w.plan.chaos)
	var events []ledgerFault
	for _, f := range w.plan.faults {
		events = append(events, f)
		if f.kind == LedgerFaultNoLeader {
			events = append(events, ledgerFault{after: min(f.after+f.dur, w.plan.chaos), kind: f.kind + "-end"})
		}
	}
	sortLedgerFaults(events)
	stopped := make(chan struct{})
	healed, stopping := false, false
	live := make(chan struct{})
	for {
		w.quiesce()
		now := time.Now()
		acted := false // a fault or a phase woke goroutines: they run to a stop before the next delivery
		for len(events) > 0 && !start.Add(events[0].after).After(now) {
			w.apply(events[0], now)
			events, acted = events[1:], true
		}
		if !healed && !now.Before(chaosEnd) {
			healed, acted = true, true
			w.heal(now, live)
		}
		if healed && !stopping && chanClosed(live) {
			stopping, acted = true, true
			cancel()
			go func() {
				w.bg.Wait()
				w.closeClients()
				close(stopped)
			}()
		}
		if chanClosed(stopped) {
			w.model.Close()
			w.net.Close()
			return
		}
		if acted {
			continue
		}
		if ok, next := w.net.Step(now); !ok {
			due := chaosEnd
			if healed {
				due = now.Add(time.Second)
			}
			if len(events) > 0 && start.Add(events[0].after).Before(due) {
				due = start.Add(events[0].after)
			}
			if !next.IsZero() && next.Before(due) {
				due = next
			}
			w.sleep(now, due, stopped)
		}
	}
}

func chanClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func sortLedgerFaults(f []ledgerFault) {
	slices.SortStableFunc(f, func(a, b ledgerFault) int { return cmp.Compare(a.after, b.after) })
}

// apply carries out one planned event.
func (w *LedgerWorld) apply(f ledgerFault, now time.Time) {
	w.rec.Add("world", "event %s dur=%v n=%d", f.kind, f.dur, f.n)
	switch f.kind {
	case ledgerSupersede:
		w.bg.Go(w.owners[f.n].run)
	case LedgerFaultRevoke:
		w.revokeCurrent()
	case LedgerFaultPause:
		if o := w.current(); o != nil && now.Add(f.dur).After(w.held[o.name]) { // a shorter pause ends none
			w.held[o.name] = now.Add(f.dur)
			w.net.Hold(o.name, w.held[o.name])
		}
	case LedgerFaultNoLeader:
		w.model.SetLeader(false)
	case LedgerFaultNoLeader + "-end":
		w.model.SetLeader(true)
	case LedgerFaultChange:
		w.model.LeaderChange()
	case LedgerFaultCompact:
		w.model.Compact(int64(f.n))
	case faultSnapshot:
		w.takeSnapshot(f.n)
	case FaultRestore, FaultRestoreBump:
		if w.restore(f.n, f.kind == FaultRestoreBump) {
			w.restored()
		}
	}
}

// revokeCurrent revokes the lease of the current owner's latest record, as an operator (or a
// restore that lost it) would.
func (w *LedgerWorld) revokeCurrent() {
	o := w.current()
	if o == nil {
		return
	}
	w.rmu.Lock()
	lease := w.lastLease[o.name]
	w.rmu.Unlock()
	if lease != 0 && w.model.Revoke(lease) {
		w.rec.Add("world", "revoked ledger lease %x of %s", lease, o.name)
	}
}

// current is the owner whose term holds (nil between terms).
func (w *LedgerWorld) current() *ledgerOwner {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, o := range w.owners {
		if t := o.token(); t != 0 && t == w.token {
			return o
		}
	}
	return nil
}

// heal turns every fault off and has the last owner prove the ledger is not wedged: a fresh key's
// Begin and Complete must succeed within ledgerHealBound.
func (w *LedgerWorld) heal(now time.Time, live chan struct{}) {
	w.rec.Add("world", "heal")
	w.net.SetFaults(NetFaults{})
	w.model.SetLeader(true)
	for _, o := range w.owners {
		w.net.Hold(o.name, time.Time{})
	}
	last := w.owners[len(w.owners)-1]
	w.bg.Go(func() {
		defer close(live)
		last.retake()
		last.proveLive(now.Add(ledgerHealBound))
	})
}

// onCommit checks every ledger record as the model commits it (under the model's lock): writes are
// fenced, a record never goes from done back to pending, and a record is completed at most once.
func (w *LedgerWorld) onCommit(rev int64, events []*mvccpb.Event, view etcdmodel.View) {
	get := view.Get
	rng := ledger.Range(ledgerPrefix, Project)
	for _, ev := range events {
		k := string(ev.Kv.Key)
		if !strings.HasPrefix(k, rng) || strings.Contains(strings.TrimPrefix(k, rng), "/") {
			continue // not a record (an attempt's claim, the owner key)
		}
		w.rmu.Lock()
		prev := w.records[k]
		if ev.Type == mvccpb.DELETE { // its lease expired or was revoked: the record is gone
			w.lost[prev.lease] = true
			delete(w.records, k)
			w.rmu.Unlock()
			continue
		}
		cur, err := parseLedgerValue(string(ev.Kv.Value))
		cur.lease, cur.raw = ev.Kv.Lease, string(ev.Kv.Value)
		w.rmu.Unlock()
		if err != nil {
			w.violate("revision %d: record %s = %q: %v", rev, k, ev.Kv.Value, err)
			continue
		}
		w.checkRecord(rev, k, prev, cur, get)
	}
}

func (w *LedgerWorld) checkRecord(rev int64, k string, prev, cur ledgerSeen, get func(string) *mvccpb.KeyValue) {
	if kv := get(ledgerOwnerKey); kv == nil || kv.CreateRevision != cur.token {
		w.violate("revision %d: %s written by %s at token %d while the owner key was not held at that token", rev, k, cur.server, cur.token)
	}
	if prev.state == ledger.Done && cur.state == ledger.Pending {
		w.violate("revision %d: %s went from done (%s@%d) back to pending (%s@%d)", rev, k, prev.server, prev.token, cur.server, cur.token)
	}
	if prev.state == ledger.Pending && cur.state == ledger.Pending && cur.token > prev.token {
		w.probe(ProbeLedgerBeginOverOlder)
	}
	cur.dones = prev.dones
	if cur.state == ledger.Done && prev.state != ledger.Done {
		cur.dones++
	}
	if cur.state == ledger.Done && prev.state == ledger.Done {
		w.violate("revision %d: %s, done, was completed again by %s@%d", rev, k, cur.server, cur.token)
	}
	if cur.dones > 1 {
		w.violate("revision %d: %s completed %d times", rev, k, cur.dones)
	}
	w.rmu.Lock()
	defer w.rmu.Unlock()
	if last := w.lastLease[cur.server]; last != 0 && last != cur.lease && w.lost[last] {
		w.probes[ProbeLedgerRegranted]++ // rmu is held
	}
	w.lastLease[cur.server] = cur.lease
	if cur.state == ledger.Done {
		w.doneAt[rev] = append(w.doneAt[rev], cur.raw)
	}
	w.records[k] = cur
}

// parseLedgerValue reads a record's documented value, "<state> <server_id> <token>" (ledger's doc):
// the ledger keeps its decoder to itself, and the world needs the writer of every put as it commits.
func parseLedgerValue(v string) (ledgerSeen, error) {
	f := strings.Fields(v)
	if len(f) != 3 || ledger.State(v) != ledger.Pending && ledger.State(v) != ledger.Done {
		return ledgerSeen{}, fmt.Errorf("not a ledger record")
	}
	tok, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		return ledgerSeen{}, fmt.Errorf("token: %w", err)
	}
	return ledgerSeen{state: ledger.State(v), server: f[1], token: tok}, nil
}

// restored makes what the world knows of the records what etcd now holds: a restore brings the
// snapshot's records back without an event (a record done after the snapshot is pending again, or
// gone, and may be completed again: the documented loss of a restore to an older backup), and the
// ledger leases granted after the snapshot are gone.
func (w *LedgerWorld) restored() {
	kvs := w.model.Prefix(ledger.Range(ledgerPrefix, Project))
	w.rmu.Lock()
	defer w.rmu.Unlock()
	w.records = map[string]ledgerSeen{}
	for _, kv := range kvs {
		k := string(kv.Key)
		if strings.Contains(strings.TrimPrefix(k, ledger.Range(ledgerPrefix, Project)), "/") {
			continue
		}
		cur, err := parseLedgerValue(string(kv.Value))
		if err != nil {
			continue
		}
		cur.lease, cur.raw = kv.Lease, string(kv.Value)
		if cur.state == ledger.Done {
			cur.dones = 1
		}
		w.records[k] = cur
	}
	for _, l := range w.lastLease {
		if _, ok := w.model.LeaseExpiry(l); !ok {
			w.lost[l] = true
		}
	}
}

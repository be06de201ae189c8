package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ledgerCallTimeout bounds one Begin or Complete, as an activity's timeout would.
const ledgerCallTimeout = 2 * time.Second

// ledgerOwner is one term's process: its own clientv3 over the model and a real ledger.Etcd, asked
// to handle a stream of dispatch requests while its term holds (and after: a superseded owner keeps
// trying until the ledger refuses it).
type ledgerOwner struct {
	w    *LedgerWorld
	i    int
	name string
	clk  *nodeClock
	r    *rand.Rand
	cli  *clientv3.Client
	l    *ledger.Etcd

	mu    sync.Mutex
	owner takeover.Owner
}

func (w *LedgerWorld) newOwner(i int) *ledgerOwner {
	name := fmt.Sprintf("o%d", i)
	return &ledgerOwner{w: w, i: i, name: name, clk: newNodeClock(w.s, "clock/"+name), r: w.s.Rand("owner/" + name)}
}

// current is the owner's term as it stands (a restore may make it begin again: retake).
func (o *ledgerOwner) current() takeover.Owner {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owner
}

func (o *ledgerOwner) token() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.owner.Token
}

// run takes the term over from the owner before, then handles the owner's requests.
func (o *ledgerOwner) run() {
	ctx := o.w.ctx
	o.cli = o.w.model.NewClient(ctx, o.name) // closed by the world once every owner has stopped
	l, err := ledger.New(o.cli, ledger.Config{Prefix: ledgerPrefix, Retention: ledgerRetention, Clock: o.clk})
	if err != nil {
		o.w.violate("%s: ledger.New: %v", o.name, err)
		return
	}
	o.l = l
	tok, ok := o.takeTerm(ctx)
	if !ok {
		return
	}
	o.mu.Lock()
	o.owner = takeover.Owner{Project: Project, ServerID: o.name, Token: tok, ElectionKey: ledgerOwnerKey}
	o.mu.Unlock()
	o.w.mu.Lock()
	o.w.token = tok
	o.w.mu.Unlock()
	o.w.rec.Add(o.name, "term begins token=%d", tok)
	for _, key := range o.w.plan.requests[o.i] {
		if !o.dispatch(ctx, key) {
			return
		}
		if !o.pause(ctx, time.Duration(50+o.r.IntN(500))*time.Millisecond) {
			return
		}
	}
}

// takeTerm supersedes the owner before it as an election would: the key of an older owner (a lower
// index) is deleted and created again, and the new create revision is the token; a newer owner's key
// ends the attempt (this one was superseded before it began). Requests go through the faulty network
// and are retried; a lost response is recognised by reading the key back.
func (o *ledgerOwner) takeTerm(ctx context.Context) (int64, bool) {
	for {
		resp, err := o.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(ledgerOwnerKey), "=", 0)).
			Then(clientv3.OpPut(ledgerOwnerKey, o.name)).Else(clientv3.OpGet(ledgerOwnerKey)).Commit()
		if err == nil && resp.Succeeded {
			return resp.Header.Revision, true
		}
		if err == nil {
			kv := resp.Responses[0].GetResponseRange().GetKvs()[0]
			switch v := string(kv.Value); {
			case v == o.name:
				return kv.CreateRevision, true // our own put, its response lost
			case v > o.name:
				return 0, false
			}
			_, _ = o.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(ledgerOwnerKey), "=", kv.CreateRevision)).
				Then(clientv3.OpDelete(ledgerOwnerKey)).Commit()
			continue
		}
		if !o.pause(ctx, 100*time.Millisecond) {
			return 0, false
		}
	}
}

func (o *ledgerOwner) pause(ctx context.Context, d time.Duration) bool {
	t := o.clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C():
		return true
	}
}

// dispatch handles one request as the dispatcher's activity does: Begin, the handler, Complete,
// each retried on errors a retry can fix. It returns false once the owner is superseded or stopped.
func (o *ledgerOwner) dispatch(ctx context.Context, key string) bool {
	for range 30 {
		var dup bool
		err := o.call(ctx, key, ledger.Pending, func(c context.Context) (err error) {
			dup, err = o.l.Begin(c, key, o.current())
			return err
		})
		if err == nil && !dup {
			o.w.rec.Add(o.name, "handles %s", key)
			if !o.pause(ctx, time.Duration(o.r.IntN(300))*time.Millisecond) {
				return false
			}
			err = o.call(ctx, key, ledger.Done, func(c context.Context) error { return o.l.Complete(c, key, o.current()) })
		}
		switch {
		case err == nil:
			return true
		case errors.Is(err, ledger.ErrSuperseded):
			if o.token() != o.w.currentToken() {
				o.w.probe(ProbeLedgerSuperseded)
			}
			o.w.rec.Add(o.name, "refused %s: superseded", key)
			return false
		}
		if !o.pause(ctx, time.Duration(100+o.r.IntN(400))*time.Millisecond) {
			return false
		}
	}
	return true
}

// call runs one ledger call under its timeout. After a failure it reads the record from the model
// (the world's view, not the client's) to see whether the write was applied while its caller heard
// of a failure: the lost response a retry must survive.
func (o *ledgerOwner) call(ctx context.Context, key, want string, f func(context.Context) error) error {
	k := ledger.Key(ledgerPrefix, Project, key)
	before := o.w.model.Get(k)
	c, cancel := context.WithTimeout(ctx, ledgerCallTimeout)
	defer cancel()
	err := f(c)
	if err == nil || errors.Is(err, ledger.ErrSuperseded) {
		return err
	}
	after := o.w.model.Get(k)
	if after != nil && (before == nil || after.ModRevision != before.ModRevision) {
		if s, perr := parseLedgerValue(string(after.Value)); perr == nil && s.server == o.name && s.state == want {
			o.w.probe(ProbeLedgerLostResponse)
		}
	}
	return err
}

func (w *LedgerWorld) currentToken() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.token
}

// proveLive is the heal's liveness check: a fresh key's Begin and Complete by this owner, the
// current one, must succeed before deadline, retried as an activity would.
func (o *ledgerOwner) proveLive(deadline time.Time) {
	ctx := o.w.ctx
	key := dispatchKey(1 << 20) // no request of the plan uses it
	var last error
	for o.clk.Now().Before(deadline) {
		if o.token() == 0 || o.token() != o.w.currentToken() {
			last = errors.New("its term has not begun")
		} else {
			last = o.call(ctx, key, ledger.Pending, func(c context.Context) error {
				_, err := o.l.Begin(c, key, o.current())
				return err
			})
			if last == nil {
				last = o.call(ctx, key, ledger.Done, func(c context.Context) error { return o.l.Complete(c, key, o.current()) })
			}
			if last == nil {
				o.w.rec.Add(o.name, "live after heal")
				return
			}
		}
		if !o.pause(ctx, 250*time.Millisecond) {
			return
		}
	}
	o.w.violate("ledger wedged: %s, the current owner, could not Begin and Complete within %v of the heal: %v", o.name, ledgerHealBound, last)
}

// retake begins a new term for the owner if a restore took its key, as its election would elect it
// again: the heal's liveness is about the ledger, not about a term etcd forgot.
func (o *ledgerOwner) retake() {
	if kv := o.w.model.Get(ledgerOwnerKey); o.token() == 0 || kv != nil && kv.CreateRevision == o.token() && string(kv.Value) == o.name {
		return
	}
	tok, ok := o.takeTerm(o.w.ctx)
	if !ok {
		return
	}
	o.mu.Lock()
	o.owner.Token = tok
	o.mu.Unlock()
	o.w.mu.Lock()
	o.w.token = tok
	o.w.mu.Unlock()
	o.w.rec.Add(o.name, "term begins again after a restore token=%d", tok)
}

package ledger

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/takeover"
)

// AttemptTTL is the TTL of an attempt's claim on its key (AttemptKey): the claim is kept
// alive every third of it while the handler runs and revoked when it returns, so it lapses this long
// after its process died or lost etcd. Shorter than election.DefaultConfig's TTL, so that a crashed
// owner's claims are gone before its successor can win; a successor of a live owner whose quiesce
// ran out waits for the handler to return instead. Only a process cut from etcd for longer than this
// while its handler runs can see a successor begin the key beside it.
const AttemptTTL = 5 * time.Second

// BeginHolding begins key as Begin does and, when the key is not done, also claims it for this
// attempt until release is called (dispatcher.HoldingLedger): the claim is AttemptKey on a lease of
// its own (AttemptTTL), written in the same transaction that records the key pending. While another
// attempt holds the key, it waits for that claim to go (the handler returned, or its process is
// gone) and begins then, instead of failing the attempt: a successor's attempt behind a planned
// move's slow handler starts the moment that handler returns, without a retry's backoff and without
// reading as a failing dispatch. It returns ErrAttemptInFlight only when ctx ends first.
func (l *Etcd) BeginHolding(ctx context.Context, key string, owner takeover.Owner) (bool, func(), error) {
	if err := ValidateOwner(owner); err != nil {
		return false, noRelease, err
	}
	for {
		done, release, err := l.beginHolding(ctx, key, owner)
		if !errors.Is(err, ErrAttemptInFlight) {
			return done, release, err
		}
		if werr := l.waitReleased(ctx, owner.Project, key); werr != nil {
			return false, noRelease, fmt.Errorf("%w (waited for it: %v)", err, werr)
		}
	}
}

// beginHolding is one try of BeginHolding.
func (l *Etcd) beginHolding(ctx context.Context, key string, owner takeover.Owner) (bool, func(), error) {
	grant, err := l.client.Grant(ctx, int64(AttemptTTL/time.Second))
	if err != nil {
		err = fmt.Errorf("ledger: attempt lease: %w", err)
		l.noteWrite(err)
		return false, noRelease, err
	}
	a := &heldAttempt{client: l.client, lease: grant.ID, clk: l.clock, stop: make(chan struct{})}
	done, err := l.begin(ctx, key, owner, grant.ID)
	if err != nil || done {
		a.revoke(ctx)
		return done, noRelease, err
	}
	a.wg.Go(func() { a.keepAlive(context.WithoutCancel(ctx)) })
	return false, sync.OnceFunc(func() {
		close(a.stop)
		a.wg.Wait()
		a.revoke(ctx)
	}), nil
}

// waitReleased returns once key has no attempt's claim (it was revoked, or lapsed with its lease),
// or with ctx's error.
func (l *Etcd) waitReleased(ctx context.Context, project, key string) error {
	k := AttemptKey(l.prefix, project, key)
	resp, err := l.client.Get(ctx, k)
	if err != nil {
		return err
	}
	if len(resp.Kvs) == 0 {
		return nil
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for wr := range l.client.Watch(wctx, k, clientv3.WithRev(resp.Header.Revision+1)) {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			if ev.Type == clientv3.EventTypeDelete {
				return nil
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return errors.New("ledger: the watch on the attempt's claim ended")
}

// noRelease is the release of a Begin that holds nothing.
func noRelease() {}

// heldAttempt is the lease of one attempt's claim, kept alive by its own goroutine until release.
type heldAttempt struct {
	client *clientv3.Client
	lease  clientv3.LeaseID
	clk    clock.Clock
	stop   chan struct{}
	wg     sync.WaitGroup
}

// keepAlive renews the lease every third of its TTL until stop; a renewal that fails is tried again
// at the next tick, and the claim lapses if none goes through for AttemptTTL.
func (a *heldAttempt) keepAlive(ctx context.Context) {
	tick := a.clk.NewTicker(AttemptTTL / 3)
	defer tick.Stop()
	for {
		select {
		case <-a.stop:
			return
		case <-tick.C():
		}
		kctx, cancel := context.WithTimeout(ctx, AttemptTTL/3)
		_, _ = a.client.KeepAliveOnce(kctx, a.lease)
		cancel()
	}
}

// revoke ends the claim at once, even when the attempt's context has ended (the handler may outlive
// it); if etcd cannot be reached, the claim lapses with its TTL.
func (a *heldAttempt) revoke(ctx context.Context) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), AttemptTTL)
	defer cancel()
	_, _ = a.client.Revoke(rctx, a.lease)
}

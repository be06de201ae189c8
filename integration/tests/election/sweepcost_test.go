package election_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"golang.org/x/sync/errgroup"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// txnCounter is a KV that counts the transactions sent through it.
type txnCounter struct {
	clientv3.KV
	txns atomic.Int64
}

func (c *txnCounter) Txn(ctx context.Context) clientv3.Txn {
	c.txns.Add(1)
	return c.KV.Txn(ctx)
}

// A process's requests at rest do not grow with the queues it leads. The Elector's sweep (which
// finds the terms an etcd restore took the keys of) compares its terms' keys in one transaction of
// at most 100 per TTL, round robin; it compared all of them every TTL, 100 to a transaction: 4
// transactions a TTL for 400 terms, 40 for 4,000 (MaxQueues is 10,000), against a fleet's budget
// of 3 etcd requests a second per worker at rest. Real etcd.
func TestSweepAtRestCostsOneTransactionPerTTL(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cfg := election.Config{TTL: election.MinTTL}
	a := newCandidate(t, c, "node-a", cfg)
	counter := &txnCounter{KV: a.client.KV}
	a.client.KV = counter

	const queues = 400
	var g errgroup.Group
	g.SetLimit(32)
	for i := range queues {
		g.Go(func() error {
			_, err := a.el.Campaign(t.Context(), project, fmt.Sprintf("q%03d", i), a.id)
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	const ttls = 5
	before := counter.txns.Load()
	time.Sleep(ttls * cfg.TTL) // at rest: nothing else sends a transaction
	txns := counter.txns.Load() - before
	// One sweep a TTL (jittered), one transaction each; twice that leaves room for the jitter and
	// stays below the 4 a sweep that comparing every term needs.
	if limit := int64(2 * ttls); txns > limit {
		t.Errorf("%d transactions at rest in %d TTLs with %d terms, want at most %d", txns, ttls, queues, limit)
	}
	t.Logf("%d transactions at rest in %d TTLs with %d terms", txns, ttls, queues)
}

package sim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/sim/etcdmodel"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// expiryScript grants the shortest lease, attaches two keys, watches them and waits (up to wait) for
// the lease to expire: the deletes, the revision they share, and what the lease API says afterwards.
func expiryScript(ctx context.Context, cli *clientv3.Client, wait time.Duration) []string {
	s := &scriptRun{cli: cli, index: map[int64]int{}}
	var lines []string
	add := func(l string) { lines = append(lines, l) }
	g, err := cli.Grant(ctx, 1)
	if err != nil {
		return []string{errLine(err)}
	}
	s.index[int64(g.ID)], s.leases = 0, []clientv3.LeaseID{g.ID}
	add(fmt.Sprintf("grant ttl=%d", g.TTL))
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	wc := cli.Watch(wctx, scriptPrefix, clientv3.WithPrefix(), clientv3.WithPrevKV())
	for _, k := range []string{"k/a", "k/b"} {
		p, err := cli.Put(ctx, k, "v", clientv3.WithLease(g.ID))
		if err != nil {
			return append(lines, errLine(err))
		}
		add(s.header(p.Header.Revision))
	}
	deleted, events := 0, ""
	for resp := range wc {
		for _, ev := range resp.Events {
			if ev.Type == clientv3.EventTypeDelete {
				deleted++
			}
		}
		events += s.events(resp.Events) // responses may batch revisions differently: compare the events only
		if deleted == 2 {
			break
		}
	}
	add("events " + events)
	add(fmt.Sprintf("deleted=%d", deleted))
	add(s.get(ctx, etcdOp{prefix: true}))
	add(s.lease(ctx, etcdOp{kind: "ttl", lease: 0}))
	add(s.lease(ctx, etcdOp{kind: "keepalive", lease: 0}))
	return lines
}

// TestConformanceEtcdLeaseExpiry compares a lease's expiry (its keys deleted in one revision, the
// lease gone) in etcd and in the model on the real clock, and proves the comparison has teeth: a model
// with the planted bug LeaseNeverExpires must fail it.
func TestConformanceEtcdLeaseExpiry(t *testing.T) {
	ctx := t.Context()
	real := expiryScript(ctx, freshEtcd(t), 30*time.Second)
	for _, c := range []struct {
		bug     etcdmodel.Bug
		conform bool
	}{{etcdmodel.NoBug, true}, {etcdmodel.LeaseNeverExpires, false}} {
		model := etcdmodel.New(etcdmodel.Options{Bug: c.bug})
		cli := model.NewClient(ctx, "expiry")
		got := expiryScript(ctx, cli, 6*time.Second)
		cli.Close()
		model.Close()
		d := diffLines(real, got)
		switch {
		case c.conform && d != "":
			t.Errorf("the model differs from etcd at %s", d)
		case !c.conform && d == "":
			t.Errorf("bug %d planted in the model, yet the conformance comparison passed: it cannot see it", c.bug)
		case !c.conform:
			t.Logf("planted bug %d found at %s", c.bug, d)
		}
	}
}

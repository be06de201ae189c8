package balance

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
)

// listWatch keeps a picture of the keys under prefix: a read of them all (snapshot), then a watch from
// the next revision (events); after a broken watch, it reads again. A failed read is retried with a
// backoff up to retryMax. ready is closed after the first read. It returns when ctx ends.
//
// It also reads again every relist or so (jittered; 0: never): a restore of etcd from a backup
// changes the keys without an event, and without --bump-revision clientv3 resumes the broken watch
// past the revisions the restore reused, so the picture would stay wrong for ever (a queue seen led
// by a key that is gone is never stood for).
func listWatch(ctx context.Context, clk clock.Clock, client *clientv3.Client, prefix string, retryMax, relist time.Duration, ready chan struct{},
	snapshot func([]*mvccpb.KeyValue), events func([]*clientv3.Event)) {
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		resp, err := client.Get(ctx, prefix, clientv3.WithPrefix())
		if err != nil {
			if !clock.Sleep(ctx, clk, clock.Jitter(clk, backoff)) {
				return
			}
			backoff = min(2*backoff, retryMax)
			continue
		}
		backoff = 50 * time.Millisecond
		snapshot(resp.Kvs)
		if first {
			close(ready)
			first = false
		}
		wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
		stop := func() bool { return false }
		if relist > 0 {
			stop = clk.AfterFunc(clock.Jitter(clk, relist), cancel).Stop
		}
		for wr := range client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			events(wr.Events)
		}
		stop()
		cancel()
	}
}

// relistEvery is how many election TTLs apart a picture is read again in full (listWatch): a restore
// is noticed within about that, at the cost of one read of the project's keys per worker.
const relistEvery = 3

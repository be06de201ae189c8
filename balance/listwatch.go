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
func listWatch(ctx context.Context, clk clock.Clock, client *clientv3.Client, prefix string, retryMax time.Duration, ready chan struct{},
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
		for wr := range client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil {
				break
			}
			events(wr.Events)
		}
		cancel()
	}
}

package baton

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/clock"
)

// Config.Clock reaches every component the Node builds, unless the component names its own: a Node
// on a clock.Fake runs on the fake's time (the rest is TestLibraryReadsTimeOnlyThroughClock's).
func TestNodeRunsOnItsConfiguredClock(t *testing.T) {
	fake := clock.NewFake(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	own := clock.NewFake(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	cfg := valid()
	cfg.Clock = fake
	cfg.Heartbeat.Clock = own
	etcd := clientv3.NewCtxClient(t.Context())
	defer etcd.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: nothing starts
	defer rdb.Close()
	n, err := New(cfg, etcd, struct{ client.Client }{}, rdb)
	if err != nil {
		t.Fatal(err)
	}
	c := n.Config()
	for name, got := range map[string]clock.Clock{
		"Config": c.Clock, "Election": n.queues.Config().Clock, "reconciler election": n.recEl.Config().Clock,
		"Balance": c.Balance.Clock, "Takeover": n.takeover.Config().Clock, "Reconciler": c.Reconciler.Clock,
		"Registry": n.reg.Config().Clock,
	} {
		if got != fake {
			t.Errorf("%s runs on %v, not the Node's clock", name, got)
		}
	}
	if got := n.hb.Config().Clock; got != own {
		t.Errorf("Heartbeat named its own clock and runs on %v", got)
	}
	if got := (Config{Project: "p", Queues: []string{"q"}}).withDefaults().Election.Clock; got != clock.Real() {
		t.Errorf("without Config.Clock the election runs on %v, not the real clock", got)
	}
}

package baton

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/ownership"
)

// Config.Ownership reaches every queue's lifecycle, the fields left zero at ownership's defaults.
func TestNodeHandsOwnershipSettingsToEveryQueue(t *testing.T) {
	cfg := valid()
	cfg.Queues = []string{"orders", "refunds"}
	cfg.Ownership = ownership.Settings{MaxReplacements: 2, PermanentHoldMax: 10 * time.Minute}
	etcd := clientv3.NewCtxClient(t.Context())
	defer etcd.Close()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: nothing starts
	defer rdb.Close()
	n, err := New(cfg, etcd, struct{ client.Client }{}, rdb)
	if err != nil {
		t.Fatal(err)
	}
	want := ownership.Settings{MaxReplacements: 2, PermanentHold: ownership.DefaultPermanentHold, PermanentHoldMax: 10 * time.Minute}
	if got := n.Config().Ownership; got != want {
		t.Errorf("Node.Config().Ownership = %+v, want %+v", got, want)
	}
	for _, q := range cfg.Queues {
		if got := n.owned[q].Settings(); got != want {
			t.Errorf("queue %s runs with %+v, want %+v", q, got, want)
		}
	}
}

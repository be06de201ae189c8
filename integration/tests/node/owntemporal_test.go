package node_test

import (
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

// ownTemporal is the fleet of the Temporal outage and restart tests: etcd, Redis and a Temporal server
// of the test's own (the test stops it), and two nodes, node-a and node-b, serving q1-q3 with their
// takeovers counted.
type ownTemporal struct {
	srv    *temporalx.Server
	e      *env
	p      string
	queues []string
	seen   *takeovers
	nodes  []*baton.Node
	cfg    baton.Config // the last node's
}

// startOwnTemporal starts the servers and the two nodes; tune (optional) adjusts each node's config.
func startOwnTemporal(t *testing.T, tune func(*baton.Config)) *ownTemporal {
	o := &ownTemporal{srv: temporalx.Start(t, temporalx.Options{}), p: project(), queues: []string{"q1", "q2", "q3"},
		seen: &takeovers{n: map[string]map[int64]int{}, terms: map[string]int{}}}
	o.e = &env{etcd: etcdx.Start(t, etcdx.Options{}), redis: redisx.Start(t, redisx.Options{})}
	o.e.rdb = redisx.Client(t, o.e.redis)
	// The nodes' and the workers' client, with the dial options Baton's own clients have
	// (clients.NewTemporal): an outage ends for them as it does in production.
	tc, err := o.srv.NewClient(func(co *client.Options) { co.ConnectionOptions.DialOptions = clients.TemporalDialOptions() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	o.e.tc = tc
	for _, id := range []string{"node-a", "node-b"} {
		o.cfg = watched(o.p, id, o.queues...)
		o.cfg.Events = o.seen.sink
		if tune != nil {
			tune(&o.cfg)
		}
		o.nodes = append(o.nodes, o.e.startNode(t, o.cfg, o.e.tc))
	}
	return o
}

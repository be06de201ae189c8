package takeover_test

import (
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
)

// Every test stops what it started (goleak).
func TestMain(m *testing.M) { harness.VerifyTestMain(m) }

func etcdClient(t *testing.T, e *env) *clientv3.Client { return etcdx.Client(t, e.etcd) }

func revokeLeaseOf(t *testing.T, cli *clientv3.Client, key string) {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("get %s: %v %v", key, resp, err)
	}
	if _, err := cli.Revoke(t.Context(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}

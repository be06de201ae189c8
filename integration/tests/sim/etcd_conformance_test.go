package sim_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	clientv3 "go.etcd.io/etcd/client/v3"
)

const etcdConformanceSeeds = 12

// diffLines returns the first line where got differs from want, or "".
func diffLines(want, got []string) string {
	for i := range max(len(want), len(got)) {
		var w, g string
		if i < len(want) {
			w = want[i]
		}
		if i < len(got) {
			g = got[i]
		}
		if w != g {
			return fmt.Sprintf("line %d:\n  real:  %s\n  model: %s", i, w, g)
		}
	}
	return ""
}

// freshEtcd starts a real embedded etcd for one script: every script starts at revision 1.
func freshEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	return etcdx.Client(t, etcdx.Start(t, etcdx.Options{}))
}

// TestConformanceEtcdScripts runs seeded operation scripts (puts with leases, txns with each compare
// kind, ranges at past revisions, deletes, lease grant/keepalive/revoke/time-to-live, watches from a
// revision, compaction) against the real embedded etcd and against the model, and compares every answer.
func TestConformanceEtcdScripts(t *testing.T) {
	ctx := t.Context()
	var all []string
	for seed := uint64(1); seed <= etcdConformanceSeeds; seed++ {
		ops := drawScript(seed, 60)
		real := runScript(ctx, freshEtcd(t), ops, 10*time.Second)
		model := etcdmodel.New(etcdmodel.Options{})
		cli := model.NewClient(ctx, "script")
		got := runScript(ctx, cli, ops, 10*time.Second)
		cli.Close()
		model.Close()
		if d := diffLines(real, got); d != "" {
			t.Fatalf("seed %d: the model differs from etcd at %s\nreal script:\n%s", seed, d, strings.Join(real, "\n"))
		}
		all = append(all, real...)
	}
	text := strings.Join(all, "\n")
	for _, shape := range []string{"compacted=", "succeeded=true", "succeeded=false", "more=true", "alive=true",
		"lease not found", "required revision has been compacted", "future revision", "DELETE[", "prev[", "l0"} {
		if !strings.Contains(text, shape) {
			t.Errorf("no script reached %q: the scripts stopped exploring", shape)
		}
	}
}

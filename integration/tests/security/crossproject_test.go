package security_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/authpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/fx/fxtest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// Each project's workers run as a user of their own, with exactly the etcd role `baton acl etcd`
// prints and the Redis ACL `baton acl redis` prints for that project: project A's worker leads A,
// and A's credentials are refused on every key of project B (election, balance, reconciler, ledger,
// heartbeat, registry), while B, beside it, leads too.
func TestAProjectsCredentialsReachNoOtherProject(t *testing.T) {
	etcd := startSecureEtcd(t, "baton", etcdPassword)
	rs := redisx.Start(t, redisx.Options{Password: redisAdminPassword})
	redisx.SkipExternal(t, rs)
	admin := redisx.Client(t, rs)
	root, err := fxmodule.NewEtcdClient(fxmodule.ClientParams{Config: etcd.clientConfig("root", "root-"+etcdPassword, true),
		Lifecycle: fxtest.NewLifecycle(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	pa, pb := project()+"a", project()+"b"
	ccOf := map[string]clients.Config{}
	for _, p := range []string{pa, pb} {
		user := "u-" + p
		grantProject(t, root, user, baton.Config{Project: p})
		rules := append([]any{"ACL", "SETUSER", user, "on", ">" + redisPassword}, anys(baton.Config{Project: p}.RedisACLRules())...)
		if err := admin.Do(t.Context(), rules...).Err(); err != nil {
			t.Fatalf("ACL SETUSER %s: %v", user, err)
		}
		ccOf[p] = withRedis(withTemporal(etcd.clientConfig(user, etcdPassword, true)), rs, user, redisPassword)
	}
	appA, nodeA := app(t, fast(pa, "iso-a", "orders"), ccOf[pa])
	appA.RequireStart()
	appB, nodeB := app(t, fast(pb, "iso-b", "orders"), ccOf[pb])
	appB.RequireStart()
	qa, qb := leads(t, nodeA, "orders"), leads(t, nodeB, "orders")
	eventually(t, 20*time.Second, "B's heartbeat entry written", func() error {
		return admin.Exists(t.Context(), heartbeat.Key("", pb, qb.WorkflowID)).Err()
	})

	// A's credentials, directly, on B's keys.
	cli, err := fxmodule.NewEtcdClient(fxmodule.ClientParams{Config: ccOf[pa], Lifecycle: fxtest.NewLifecycle(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	el := election.DefaultConfig().Prefix
	key := dispatcher.Request{Type: "t", TaskID: "1", PayloadSHA256: strings.Repeat("ab", 32)}.Key()
	for what, k := range map[string]string{
		"election":     election.Keys{Prefix: el}.Election(pb, "orders"),
		"balance":      balance.Keys{ElectionPrefix: el}.Project(pb) + "x",
		"reconciler":   reconciler.LastCycleKey(reconciler.DefaultElectionPrefix, pb),
		"run log":      takeover.RunLogProject("", pb) + "orders",
		"ledger":       ledger.Key("", pb, key),
		"ledger claim": ledger.AttemptKey("", pb, key),
	} {
		if _, err := cli.Get(ctx, k); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("A reads B's %s key %s: %v, want permission denied", what, k, err)
		}
		if _, err := cli.Put(ctx, k, "x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("A writes B's %s key %s: %v, want permission denied", what, k, err)
		}
	}
	conn := redis.NewClient(&redis.Options{Addr: rs.Addr(), Username: "u-" + pa, Password: redisPassword})
	defer conn.Close()
	for what, k := range map[string]string{
		"heartbeat":            heartbeat.Key("", pb, qb.WorkflowID),
		"old-layout heartbeat": heartbeat.LegacyKey("", qb.WorkflowID),
		"registry":             registry.ProjectPrefix("", pb) + "idx",
	} {
		if err := conn.HGetAll(ctx, k).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("A reads B's %s key %s: %v, want NOPERM", what, k, err)
		}
		if err := conn.Del(ctx, k).Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("A deletes B's %s key %s: %v, want NOPERM", what, k, err)
		}
	}
	if n, err := conn.Exists(ctx, heartbeat.Key("", pa, qa.WorkflowID)).Result(); err != nil || n != 1 {
		t.Errorf("A's own heartbeat entry as A: %d, %v", n, err)
	}
	// Both still lead, each its own project.
	if q := leads(t, nodeA, "orders"); q.Token != qa.Token {
		t.Errorf("A's term changed: token %d, was %d", q.Token, qa.Token)
	}
	leads(t, nodeB, "orders")
}

// grantProject creates user with a role of its name that has exactly what `baton acl etcd` prints
// for cfg: readwrite on cfg.EtcdPrefixes and read on the ledger's old layout.
func grantProject(t *testing.T, root *clientv3.Client, user string, cfg baton.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if _, err := root.RoleAdd(ctx, user); err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg.EtcdPrefixes(ledger.DefaultPrefix) {
		if _, err := root.RoleGrantPermission(ctx, user, p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(authpb.READWRITE)); err != nil {
			t.Fatal(err)
		}
	}
	key, end := ledger.LegacyRange(ledger.DefaultPrefix)
	if _, err := root.RoleGrantPermission(ctx, user, key, end, clientv3.PermissionType(authpb.READ)); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserAdd(ctx, user, etcdPassword); err != nil {
		t.Fatal(err)
	}
	if _, err := root.UserGrantRole(ctx, user, user); err != nil {
		t.Fatal(err)
	}
}

func anys(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

package security_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/internal/testcerts"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
)

// batonPrefixes are Baton's etcd key prefixes for every project (the tests' projects are made up as
// they go): what baton.Config.EtcdPrefixes grants one project, each cut back to before the project
// (the dispatch ledger's range names none).
func batonPrefixes() []string {
	const p = "any-project"
	var out []string
	for _, k := range (baton.Config{Project: p}).EtcdPrefixes(ledger.DefaultPrefix) {
		out = append(out, strings.TrimSuffix(k, p+"/"))
	}
	return out
}

// secureEtcd is an embedded etcd that serves clients over TLS only, requires a client certificate
// signed by its CA, and has authentication on: root (for the test's own setup) and user, whose role
// "baton" reads and writes Baton's prefixes and nothing else.
type secureEtcd struct {
	cluster *etcdx.Cluster
	ca      *testcerts.CA
	// cert is the client certificate Baton presents. Its common name is no etcd user on purpose:
	// etcd takes the common name as the user of a request without a token, so a certificate named
	// after a user would log in without a password.
	cert           testcerts.Pair
	user, password string
	// authenticates counts the Authenticate calls the server has answered: each one checks a
	// password against its bcrypt hash.
	authenticates *atomic.Int64
}

func startSecureEtcd(t *testing.T, user, password string) *secureEtcd {
	t.Helper()
	if os.Getenv(etcdx.EnvEndpoints) != "" {
		t.Skip(etcdx.EnvEndpoints + " is set: this test needs an embedded etcd with TLS and auth of its own")
	}
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "etcd")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("etcd-server")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Client("baton-client", "baton-worker-cert")
	if err != nil {
		t.Fatal(err)
	}
	adminTLS, err := ca.ClientTLS(cert)
	if err != nil {
		t.Fatal(err)
	}
	authenticates := new(atomic.Int64)
	c := etcdx.Start(t, etcdx.Options{
		ClientTLS: &transport.TLSInfo{CertFile: server.CertFile, KeyFile: server.KeyFile,
			TrustedCAFile: ca.CertFile, ClientCertAuth: true},
		ClientTLSConfig: adminTLS,
		Configure: func(_ int, cfg *embed.Config) {
			// etcd checks a password with bcrypt (cost 10: ~60 ms of CPU) on every Authenticate, and
			// etcd's client authenticates again for every stream it opens (each lease keepalive and
			// watch). On a loaded 2-core machine under the race detector that alone can delay a
			// keepalive past a 2 s TTL; the minimum cost keeps the tests about Baton, not bcrypt.
			cfg.BcryptCost = uint(bcrypt.MinCost)
			cfg.GRPCAdditionalServerOptions = append(cfg.GRPCAdditionalServerOptions, grpc.ChainUnaryInterceptor(
				func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
					if info.FullMethod == "/etcdserverpb.Auth/Authenticate" {
						authenticates.Add(1)
					}
					return h(ctx, req)
				}))
		},
	})
	s := &secureEtcd{cluster: c, ca: ca, cert: cert, user: user, password: password, authenticates: authenticates}
	s.setupAuth(t)
	return s
}

// setupAuth creates root, the role limited to Baton's prefixes and the user, then enables auth.
func (s *secureEtcd) setupAuth(t *testing.T) {
	t.Helper()
	cli := etcdx.Client(t, s.cluster)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	steps := []func() error{
		func() error { _, err := cli.RoleAdd(ctx, "root"); return err },
		func() error { _, err := cli.UserAdd(ctx, "root", "root-"+s.password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, "baton"); return err },
	}
	for _, p := range batonPrefixes() {
		steps = append(steps, func() error {
			_, err := cli.RoleGrantPermission(ctx, "baton", p, clientv3.GetPrefixRangeEnd(p), clientv3.PermissionType(authpb.READWRITE))
			return err
		})
	}
	// The old ledger layout's read grant `baton acl etcd` prints while workers still read it.
	legacyKey, legacyEnd := ledger.LegacyRange(ledger.DefaultPrefix)
	steps = append(steps,
		func() error {
			_, err := cli.RoleGrantPermission(ctx, "baton", legacyKey, legacyEnd, clientv3.PermissionType(authpb.READ))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, s.user, s.password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, s.user, "baton"); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	)
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth setup, step %d: %v", i, err)
		}
	}
}

// clientConfig returns the etcd part of a ClientConfig: user and password (none when empty), and the
// client certificate when withCert is set.
func (s *secureEtcd) clientConfig(user, password string, withCert bool) clients.Config {
	cc := clients.Config{EtcdEndpoints: s.cluster.Endpoints(), EtcdUsername: user, EtcdPassword: password,
		EtcdTLS: clients.TLSFiles{CAFile: s.ca.CertFile}, EtcdDialTimeout: 3 * time.Second}
	if withCert {
		cc.EtcdTLS.CertFile, cc.EtcdTLS.KeyFile = s.cert.CertFile, s.cert.KeyFile
	}
	return cc
}

// batonACL is the Redis ACL of Baton's user as the library ships it (Config.RedisACLRules), its key
// patterns opened to every project (the tests' projects are made up as they go), and exactly the
// commands Baton sends, less the commands in without.
func batonACL(user, password string, without ...string) []string {
	const p = "any-project"
	args := []string{"--user", user, "on", ">" + password}
	for _, rule := range (baton.Config{Project: p}).RedisACLRules() {
		if strings.HasPrefix(rule, "~") {
			rule = strings.ReplaceAll(rule, p, "*")
		}
		if !slices.Contains(without, rule) {
			args = append(args, rule)
		}
	}
	return args
}

// withTemporal fills in the in-process Temporal server and the test namespace.
func withTemporal(cc clients.Config) clients.Config {
	cc.TemporalAddress, cc.TemporalNamespace = temporalServer.HostPort(), temporalServer.Namespace()
	return cc
}

// withRedis fills in the Redis server and credentials.
func withRedis(cc clients.Config, rs *redisx.Server, user, password string) clients.Config {
	cc.RedisAddr, cc.RedisUsername, cc.RedisPassword = rs.Addr(), user, password
	return cc
}

func project() string { return fmt.Sprintf("sec%d", time.Now().UnixNano()%1e12) }

// fast is a Config with compressed intervals for tests.
func fast(project, id string, queues ...string) baton.Config {
	return baton.Config{
		Project: project, Queues: queues, ServerID: id,
		Election:   election.Config{TTL: 2 * time.Second},
		Heartbeat:  heartbeat.Config{Interval: 200 * time.Millisecond},
		Registry:   registry.Config{HeartbeatInterval: 200 * time.Millisecond},
		Reconciler: reconciler.Config{Interval: 300 * time.Millisecond, StaleAfter: time.Second},
		Progress:   progress.Config{Disabled: true}, // no dispatcher worker runs here
	}
}

// app is a worker built the way applications build it: Fx, fxmodule.Clients, fxmodule.Module.
func app(t *testing.T, cfg baton.Config, cc clients.Config) (*fxtest.App, *baton.Node) {
	t.Helper()
	var node *baton.Node
	log := zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(cfg.ServerID)
	a := fxtest.New(t, fx.NopLogger, fx.Supply(cfg, cc, log), fxmodule.Clients, fxmodule.Module, fx.Populate(&node))
	t.Cleanup(func() {
		// Stopping a stopped (or never started) app does nothing.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 20*time.Second)
		defer cancel()
		_ = a.Stop(ctx)
	})
	return a, node
}

// startErr builds and starts the same app and returns why it could not start (nil if it did; it is
// stopped again then). The clients are built first, etcd's first, so that a failing constructor
// leaves no other client behind (Fx stops nothing of an app that failed to build).
func startErr(t *testing.T, cfg baton.Config, cc clients.Config) error {
	t.Helper()
	a := fx.New(fx.NopLogger, fx.Supply(cfg, cc, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))),
		fxmodule.Clients,
		fx.Module("clients-first", fx.Invoke(func(*clientv3.Client, client.Client, redis.UniversalClient) {})),
		fxmodule.Module, fx.Invoke(func(*baton.Node) {}))
	if err := a.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	if err := a.Start(ctx); err != nil {
		return err
	}
	if err := a.Stop(ctx); err != nil {
		t.Errorf("stop: %v", err)
	}
	return nil
}

func eventually(t *testing.T, d time.Duration, what string, f func() error) {
	t.Helper()
	harness.Eventually(t, d, what, f)
}

// leads waits until node leads queue with a dispatcher run and returns the queue's status.
func leads(t *testing.T, node *baton.Node, queue string) baton.QueueStatus {
	t.Helper()
	var qs baton.QueueStatus
	eventually(t, 30*time.Second, node.Config().ServerID+" leads "+queue+" with a dispatcher run", func() error {
		for _, q := range node.Status().Queues {
			if q.Queue == queue && q.Leading && q.RunID != "" {
				qs = q
				return nil
			}
		}
		return fmt.Errorf("status %+v", node.Status())
	})
	return qs
}

// mustContain fails unless err is non-nil and its message contains every part.
func mustContain(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: no error", what)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Fatalf("%s: error %q does not say %q", what, err, p)
		}
	}
}

// keepalives waits until node's etcd session has been kept alive n more times: each acknowledged
// keepalive moves the session's deadline on by at least the keepalive interval (TTL/3).
func keepalives(t *testing.T, node *baton.Node, n int) {
	t.Helper()
	start := node.Status().SessionValidUntil
	step := node.Config().Election.TTL / 3
	if step == 0 {
		step = election.DefaultConfig().TTL / 3
	}
	eventually(t, 30*time.Second, fmt.Sprintf("%d keepalives", n), func() error {
		if until := node.Status().SessionValidUntil; until.Before(start.Add(time.Duration(n) * step)) {
			return fmt.Errorf("session valid until %v, was %v", until, start)
		}
		return nil
	})
}

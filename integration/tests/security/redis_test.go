package security_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/internal/testcerts"
	"github.com/baton-run/baton/reconciler"
)

const (
	redisAdminPassword = "redis-admin-Vb27pLq0"
	redisPassword      = "redis-baton-Hx93mWr4"
)

// startACLRedis starts a Redis whose default user needs redisAdminPassword (the test's own client)
// and whose user "baton" has redisPassword and reaches Baton's keys only.
func startACLRedis(t *testing.T) *redisx.Server {
	t.Helper()
	rs := redisx.Start(t, redisx.Options{Password: redisAdminPassword, Args: batonACL("baton", redisPassword)})
	redisx.SkipExternal(t, rs) // the ACL user is configured at the server's start
	return rs
}

// A Node whose Redis client logs in as an ACL user limited to Baton's keys leads, heartbeats and
// registers; the user can touch nothing else.
func TestRedisACLUser(t *testing.T) {
	rs := startACLRedis(t)
	admin := redisx.Client(t, rs)
	etcd := etcdx.Start(t, etcdx.Options{})
	cc := withRedis(withTemporal(clients.Config{EtcdEndpoints: etcd.Endpoints()}), rs, "baton", redisPassword)

	a, node := app(t, fast(project(), "acl-a", "orders"), cc)
	a.RequireStart()
	qs := leads(t, node, "orders")
	eventually(t, 10*time.Second, "heartbeat entry and worker registration written as user baton", func() error {
		if n, err := admin.Exists(t.Context(), heartbeat.Key("", node.Config().Project, qs.WorkflowID)).Result(); err != nil || n != 1 {
			return errString("no heartbeat entry")
		}
		if st := node.Status().Worker; st.LastHeartbeat.IsZero() || st.LastError != "" {
			return errString("worker not registered: " + st.LastError)
		}
		return nil
	})

	eventually(t, 20*time.Second, "a reconcile cycle and ready as user baton", func() error {
		if last := node.Status().Reconciler.Last; last == nil || last.Error != "" {
			return fmt.Errorf("last reconcile cycle %+v", last)
		}
		return node.Ready()
	})

	rdb, err := fxmodule.NewRedisClient(fxmodule.ClientParams{Config: cc, Lifecycle: fxtest.NewLifecycle(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	for what, cmd := range map[string]redis.Cmder{
		"SET outside Baton's keys": rdb.Set(t.Context(), "app:secret", "x", 0),
		"FLUSHALL":                 rdb.FlushAll(t.Context()),
		"KEYS":                     rdb.Keys(t.Context(), "*"),
	} {
		if err := cmd.Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s as user baton = %v, want NOPERM", what, err)
		}
	}
	a.RequireStop()
}

// A wrong password (or none) fails the app's start with an error that names authentication and the
// user, never the password.
func TestRedisWrongPasswordFailsTheStart(t *testing.T) {
	rs := startACLRedis(t)
	etcd := etcdx.Start(t, etcdx.Options{})
	base := withTemporal(clients.Config{EtcdEndpoints: etcd.Endpoints()})
	for _, tc := range []struct {
		name, user, password string
		want                 []string
	}{
		{"wrong password of the ACL user", "baton", "WrongPassword-123", []string{`refused authentication as user "baton"`, "WRONGPASS"}},
		{"password of another user", "baton", redisAdminPassword, []string{`refused authentication as user "baton"`, "WRONGPASS"}},
		{"wrong password of the default user", "", "WrongPassword-123", []string{`refused authentication as user "default"`, "WRONGPASS"}},
		{"no password", "", "", []string{`refused authentication as user "default"`, "NOAUTH"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := startErr(t, fast(project(), "wrongpass", "orders"), withRedis(base, rs, tc.user, tc.password))
			mustContain(t, "start", err, tc.want...)
			for _, secret := range []string{redisPassword, redisAdminPassword} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("the error holds a password: %v", err)
				}
			}
		})
	}
}

// A Node whose Redis password is wrong (rotated under it, say) keeps leading from etcd's point of
// view and retries Redis at its intervals, not in a tight loop: the connections Redis receives
// stay within what the loops' intervals allow, and the errors name the refusal.
func TestRedisWrongPasswordDoesNotStorm(t *testing.T) {
	rs := startACLRedis(t)
	admin := redisx.Client(t, rs)
	etcd := etcdx.Start(t, etcdx.Options{})
	cc := withRedis(withTemporal(clients.Config{EtcdEndpoints: etcd.Endpoints()}), rs, "baton", "WrongPassword-123")
	rdb, err := fxmodule.NewRedisClient(fxmodule.ClientParams{Config: cc, Lifecycle: fxtest.NewLifecycle(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()

	const interval = 500 * time.Millisecond
	queues := []string{"q1", "q2"}
	core, logs := observer.New(zap.WarnLevel)
	cfg := fast(project(), "storm", queues...)
	cfg.Heartbeat.Interval, cfg.Registry.HeartbeatInterval = interval, interval
	cfg.Reconciler = reconciler.Config{Interval: time.Second, StaleAfter: 2 * time.Second}
	cfg.Logger = zap.New(core)
	var (
		mu       sync.Mutex
		hbFailed []event.Event
	)
	cfg.Events = func(e event.Event) {
		if e.Kind == event.HeartbeatFailed {
			mu.Lock()
			hbFailed = append(hbFailed, e)
			mu.Unlock()
		}
	}
	node, err := baton.New(cfg, etcdx.Client(t, etcd), temporalx.Client(t, temporalServer), rdb)
	if err != nil {
		t.Fatal(err)
	}
	if err := node.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 20*time.Second)
		defer cancel()
		_ = node.Stop(ctx) // its deregistration fails too
	}()
	for _, q := range queues {
		leads(t, node, q)
	}

	const window = 4 * time.Second
	before, deniedBefore, logsBefore := redisStats(t, admin), refusedLogins(t, admin), logs.Len()
	time.Sleep(window)
	after, deniedAfter, logsAfter := redisStats(t, admin), refusedLogins(t, admin), logs.Len()
	conns := after["total_connections_received"] - before["total_connections_received"]
	denied := deniedAfter - deniedBefore
	lines := logsAfter - logsBefore

	// What the loops may do in the window, each failing call costing one connection: per queue a
	// dispatcher heartbeat every interval, a worker eviction every interval/2 at the most (jitter)
	// and a worker heartbeat every interval; one reconcile cycle per 0.9 s at the most.
	perSecond := float64(len(queues))*(1/interval.Seconds()+2/interval.Seconds()+1/interval.Seconds()) + 1/0.9
	budget := int64(perSecond*window.Seconds()*1.25) + 5
	t.Logf("in %v with a wrong password: %d connections, %d refused logins, %d warnings (budget %d; %d queues, intervals %v)",
		window, conns, denied, lines, budget, len(queues), interval)
	// A connection may try two logins (HELLO 3 AUTH, then AUTH for servers without RESP3).
	if conns > budget || denied > 2*budget || int64(lines) > budget {
		t.Fatalf("retry storm: %d connections, %d refused logins, %d warnings in %v, budget %d", conns, denied, lines, window, budget)
	}
	if denied < int64(len(queues))*int64(window/interval)/2 {
		t.Fatalf("only %d refused logins in %v: the loops stopped retrying", denied, window)
	}
	for _, e := range logs.All() {
		for _, f := range e.Context {
			if f.Key == "error" && f.Type == 26 /* ErrorType */ {
				if msg := f.Interface.(error).Error(); strings.Contains(msg, redisPassword) || strings.Contains(msg, "WrongPassword-123") {
					t.Fatalf("a log line holds the password: %s", msg)
				}
			}
		}
	}
	if n := logs.FilterFieldKey("error").Len(); n == 0 {
		t.Fatal("no failure was logged")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(hbFailed) == 0 || !strings.Contains(hbFailed[0].Err, "WRONGPASS") {
		t.Fatalf("the heartbeat failure does not name the refused login: %+v", hbFailed)
	}
}

// Redis with TLS only and client certificates required: a Node with the CA and its certificate
// works; without the certificate, or without the CA, the start fails and says why.
func TestRedisMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "redis")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Client("redis-client", "baton")
	if err != nil {
		t.Fatal(err)
	}
	adminTLS, err := ca.ClientTLS(cert)
	if err != nil {
		t.Fatal(err)
	}
	rs := redisx.Start(t, redisx.Options{Password: redisAdminPassword, Args: batonACL("baton", redisPassword),
		TLS: &redisx.TLS{CertFile: server.CertFile, KeyFile: server.KeyFile, CAFile: ca.CertFile, AuthClients: true, Client: adminTLS}})
	redisx.SkipExternal(t, rs)
	admin := redisx.Client(t, rs)
	etcd := etcdx.Start(t, etcdx.Options{})
	cc := withRedis(withTemporal(clients.Config{EtcdEndpoints: etcd.Endpoints()}), rs, "baton", redisPassword)
	cc.RedisTLS = clients.TLSFiles{CAFile: ca.CertFile, CertFile: cert.CertFile, KeyFile: cert.KeyFile}

	a, node := app(t, fast(project(), "tls-a", "orders"), cc)
	a.RequireStart()
	qs := leads(t, node, "orders")
	eventually(t, 10*time.Second, "heartbeat entry written over TLS", func() error {
		if n, err := admin.Exists(t.Context(), heartbeat.Key("", node.Config().Project, qs.WorkflowID)).Result(); err != nil || n != 1 {
			return errString("no heartbeat entry")
		}
		return nil
	})
	a.RequireStop()

	noCert := cc
	noCert.RedisTLS = clients.TLSFiles{CAFile: ca.CertFile}
	mustContain(t, "start without a client certificate", startErr(t, fast(project(), "tls-b", "orders"), noCert),
		"refused the TLS connection", "certificate required")
	noCA := cc
	noCA.RedisTLS.CAFile = ""
	mustContain(t, "start without the CA", startErr(t, fast(project(), "tls-c", "orders"), noCA),
		"refused the TLS connection", "certificate signed by unknown authority")
}

// refusedLogins sums the failed logins Redis's ACL LOG has counted (Redis 7.0 has no INFO counter).
func refusedLogins(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	entries, err := c.ACLLog(t.Context(), 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, e := range entries {
		if e.Reason == "auth" {
			n += e.Count
		}
	}
	return n
}

// redisStats reads the integer counters of INFO stats.
func redisStats(t *testing.T, c *redis.Client) map[string]int64 {
	t.Helper()
	s, err := c.Info(t.Context(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(s, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if n, err := strconv.ParseInt(v, 10, 64); ok && err == nil {
			out[k] = n
		}
	}
	return out
}

type errString string

func (e errString) Error() string { return string(e) }

// A heartbeat write that Redis refuses (here the ACL lacks HSET, as an incomplete command list would)
// shows: readiness fails naming the heartbeat and the queue's last error says why, instead of a leader
// that looks healthy while the reconciler takes its run for a dead owner's.
func TestRefusedHeartbeatShowsInReadiness(t *testing.T) {
	rs := redisx.Start(t, redisx.Options{Password: redisAdminPassword, Args: batonACL("baton", redisPassword, "+hset")})
	redisx.SkipExternal(t, rs)
	etcd := etcdx.Start(t, etcdx.Options{})
	cc := withRedis(withTemporal(clients.Config{EtcdEndpoints: etcd.Endpoints()}), rs, "baton", redisPassword)
	a, node := app(t, fast(project(), "acl-a", "orders"), cc)
	a.RequireStart()
	eventually(t, 30*time.Second, "readiness names the refused heartbeat", func() error {
		err := node.Ready()
		if !errors.Is(err, baton.ErrHeartbeatFailing) || !strings.Contains(err.Error(), "can't run this command") {
			return fmt.Errorf("Ready = %v", err)
		}
		for _, q := range node.Status().Queues {
			if q.Queue == "orders" && strings.Contains(q.LastError, "can't run this command") {
				return nil
			}
		}
		return fmt.Errorf("status %+v", node.Status().Queues)
	})
	a.RequireStop()
}

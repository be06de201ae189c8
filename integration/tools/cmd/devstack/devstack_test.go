package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/stack"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

// Every test stops what it started. The stack's Temporal server is a child process here (Baton's
// own through temporalx, or a stand-in for the Temporal CLI): the in-process one leaves goroutines
// behind when it stops.
func TestMain(m *testing.M) { harness.VerifyTestMain(m) }

// ownServers makes the helpers start servers even when the BATON_* variables point at running ones.
func ownServers(t *testing.T) {
	for _, name := range []string{etcdx.EnvEndpoints, temporalx.EnvAddress, temporalx.EnvNamespace,
		redisx.EnvAddr, redisx.EnvPassword} {
		t.Setenv(name, "")
	}
}

func TestStartServesAllAndCloseRemovesEverything(t *testing.T) {
	ownServers(t)
	tmp := t.TempDir()
	envFile := filepath.Join(tmp, "out", "devstack.env")
	if err := os.Mkdir(filepath.Dir(envFile), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(envFile, []byte("BATON_REDIS_ADDR=stale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantMode := stack.RedisReal
	if _, err := redisx.Binary(); err != nil {
		wantMode = stack.RedisInprocess
	}
	var stdout, stderr bytes.Buffer
	began := time.Now()
	// Baton's own Temporal server (-temporal=builtin), and every server on a port asked for.
	ports := freePorts(t, 3)
	temporalPort, etcdPort, redisPort := ports[0], ports[1], ports[2]
	st, err := start(t.Context(), options{servers: stack.Options{EtcdMembers: 1, EtcdPort: etcdPort, RedisPort: redisPort,
		Redis: stack.RedisAuto, Dir: tmp},
		temporal: temporalOptions{mode: temporalBuiltin, port: temporalPort}, envFile: envFile, stdout: &stdout, stderr: &stderr})
	if err != nil {
		t.Fatalf("start: %v\nstderr: %s", err, stderr.String())
	}
	closed := false
	t.Cleanup(func() {
		if !closed {
			st.Close()
		}
	})
	t.Logf("started in %v:\n%s%s", time.Since(began).Round(time.Millisecond), stdout.String(), stderr.String())

	env := readEnvFile(t, envFile)
	for _, v := range st.Env() {
		if v.Value == "" || env[v.Name] != v.Value {
			t.Errorf("env file: %s=%q, stack says %q", v.Name, env[v.Name], v.Value)
		}
	}
	for _, name := range []string{"BATON_ETCD_ENDPOINTS", "BATON_TEMPORAL_ADDRESS", "BATON_TEMPORAL_NAMESPACE",
		"BATON_REDIS_ADDR", "BATON_DEVSTACK_REDIS", "BATON_DEVSTACK_TEMPORAL", envControl} {
		if env[name] == "" {
			t.Errorf("env file has no %s: %v", name, env)
		}
	}
	if len(env) != 7 {
		t.Errorf("env file has %d variables, want 7: %v", len(env), env)
	}
	if env["BATON_DEVSTACK_REDIS"] != wantMode {
		t.Errorf("BATON_DEVSTACK_REDIS=%s, want %s", env["BATON_DEVSTACK_REDIS"], wantMode)
	}
	if env["BATON_DEVSTACK_TEMPORAL"] != temporalBuiltin {
		t.Errorf("BATON_DEVSTACK_TEMPORAL=%s, want %s", env["BATON_DEVSTACK_TEMPORAL"], temporalBuiltin)
	}
	for _, want := range []struct{ name, value string }{
		{"BATON_TEMPORAL_ADDRESS", fmt.Sprintf("127.0.0.1:%d", temporalPort)},
		{"BATON_ETCD_ENDPOINTS", fmt.Sprintf("http://127.0.0.1:%d", etcdPort)},
		{"BATON_REDIS_ADDR", fmt.Sprintf("127.0.0.1:%d", redisPort)},
	} {
		if env[want.name] != want.value {
			t.Errorf("%s=%s, want %s (the port asked for)", want.name, env[want.name], want.value)
		}
	}
	if !strings.Contains(stdout.String(), formatEnv(st.Env())) {
		t.Errorf("stdout lacks the env lines:\n%s", stdout.String())
	}
	for _, server := range []string{"etcd", "redis", "temporal"} {
		if !strings.Contains(stdout.String(), "# "+server) || !strings.Contains(stdout.String(), "ready in") {
			t.Errorf("stdout lacks the human line of %s:\n%s", server, stdout.String())
		}
	}

	// Sourced beside an app's Baton settings, the env file loads with both loaders as it is.
	for name, value := range env {
		t.Setenv(name, value)
	}
	t.Setenv("BATON_PROJECT", "billing")
	t.Setenv("BATON_QUEUES", "orders")
	if _, err := baton.LoadEnv(baton.Config{}); err != nil {
		t.Errorf("baton.LoadEnv with the env file: %v", err)
	}
	if _, err := clients.LoadEnv(clients.Config{}); err != nil {
		t.Errorf("clients.LoadEnv with the env file: %v", err)
	}

	checkEtcd(t, strings.Split(env["BATON_ETCD_ENDPOINTS"], ","))
	checkTemporal(t, env["BATON_TEMPORAL_ADDRESS"], env["BATON_TEMPORAL_NAMESPACE"])
	checkRedisPing(t, env["BATON_REDIS_ADDR"])

	closed = true
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(envFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env file still there after Close (%v)", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 1 || ents[0].Name() != "out" {
		t.Errorf("data dir left behind in %s: %v", tmp, ents)
	}
	for _, addr := range []string{env["BATON_REDIS_ADDR"], env["BATON_TEMPORAL_ADDRESS"],
		strings.TrimPrefix(env["BATON_ETCD_ENDPOINTS"], "http://")} {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			t.Errorf("%s still accepts connections after Close", addr)
		}
	}
	if err := st.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestStartFailureStopsWhatStarted(t *testing.T) {
	ownServers(t)
	tmp := t.TempDir()
	var stdout bytes.Buffer
	_, err := start(t.Context(), options{servers: stack.Options{EtcdMembers: 1, Redis: stack.RedisReal, Dir: tmp,
		RedisBinary: func() (string, error) { return "", redisx.ErrNoBinary }}, temporal: temporalOptions{mode: temporalBuiltin},
		envFile: filepath.Join(tmp, "devstack.env"), stdout: &stdout})
	if err == nil || !strings.Contains(err.Error(), "redis-server is not installed") {
		t.Fatalf("start = %v, want a redis-server is not installed error", err)
	}
	if !strings.Contains(stdout.String(), "# etcd") {
		t.Fatalf("etcd was not started first:\n%s", stdout.String())
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left behind after a failed start: %v", ents)
	}
	// TestMain's leak check finds the etcd member if it still runs.
}

// noTemporal stands in for the Temporal server in tests of the rest of the stack.
type noTemporal struct{}

func (noTemporal) HostPort() string  { return "" }
func (noTemporal) Namespace() string { return "" }
func (noTemporal) Close() error      { return nil }

func TestInprocessRedis(t *testing.T) {
	ownServers(t)
	missing := func() (string, error) { return "", redisx.ErrNoBinary }
	for _, tc := range []struct {
		name   string
		o      stack.Options
		reason string
	}{
		{"flag", stack.Options{Redis: stack.RedisInprocess}, "because -redis=inprocess was given"},
		{"auto without redis-server", stack.Options{Redis: stack.RedisAuto, RedisBinary: missing}, "because redis-server is not installed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			tc.o.Warn = func(format string, args ...any) { fmt.Fprintf(&stderr, format+"\n", args...) }
			tc.o.Temporal = func(context.Context, string) (stack.Temporal, error) { return noTemporal{}, nil }
			tc.o.Dir = t.TempDir()
			s, err := stack.Start(t.Context(), tc.o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			addr := s.RedisAddr
			if s.RedisMode != stack.RedisInprocess || s.Redis != nil {
				t.Fatalf("mode %s, want %s", s.RedisMode, stack.RedisInprocess)
			}
			if !strings.Contains(stderr.String(), "NOTICE: Redis at "+addr+" is an in-process stand-in") ||
				!strings.Contains(stderr.String(), tc.reason) ||
				!strings.Contains(stderr.String(), "Fault drills against Redis") {
				t.Errorf("no clear NOTICE:\n%s", stderr.String())
			}
			if h, _, _ := net.SplitHostPort(addr); h != "127.0.0.1" {
				t.Errorf("listens on %s, want loopback", addr)
			}
			// Both the client defaults (RESP3, CLIENT SETINFO) and the Protocol 2 options of redisx.
			for _, o := range []*redis.Options{{Addr: addr}, {Addr: addr, Protocol: 2, DisableIdentity: true}} {
				checkBatonRedisUse(t, redis.NewClient(o))
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
				t.Errorf("%s still accepts connections after Close", addr)
			}
		})
	}
}

// beatScript uses Redis the way Baton's heartbeat and registry scripts do: TYPE's status reply as
// a table, server TIME, HGET/HSET/HMGET, PEXPIRE, string.format of millisecond numbers.
var beatScript = redis.NewScript(`
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind == 'hash' then
  local cur = tonumber(redis.call('HGET', KEYS[1], 'token'))
  if cur and cur > tonumber(ARGV[1]) then return {0, tostring(cur)} end
end
local t = redis.call('TIME')
local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'updated_ms', string.format('%.0f', ms))
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local v = redis.call('HMGET', KEYS[1], 'token', 'updated_ms')
return {1, v[2], kind}
`)

func checkBatonRedisUse(t *testing.T, rdb *redis.Client) {
	t.Helper()
	defer rdb.Close()
	ctx := t.Context()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	// Twice: EVAL loads the script, then EVALSHA finds it.
	for i, wantKind := range []string{"none", "hash"} {
		res, err := beatScript.Run(ctx, rdb, []string{"hb:a"}, 5, 60_000).Slice()
		if err != nil {
			t.Fatalf("script run %d: %v", i, err)
		}
		ms, _ := res[1].(string)
		if res[0] != int64(1) || res[2] != wantKind || len(ms) < 13 {
			t.Fatalf("script run %d = %v, want {1, <ms>, %s}", i, res, wantKind)
		}
		if d := time.Since(time.UnixMilli(mustInt(t, ms))); d < -time.Second || d > time.Minute {
			t.Fatalf("TIME in the script is %v off", d)
		}
	}
	if res, err := beatScript.Run(ctx, rdb, []string{"hb:a"}, 4, 60_000).Slice(); err != nil || res[0] != int64(0) || res[1] != "5" {
		t.Fatalf("lower token = %v %v, want refused with {0, 5}", res, err)
	}
	// Keys expire with the wall clock.
	if err := rdb.Set(ctx, "fence", "7", 50*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	if v, err := rdb.Get(ctx, "fence").Result(); err != nil || v != "7" {
		t.Fatalf("GET fence = %q %v", v, err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for rdb.Exists(ctx, "fence").Val() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("a key with a 50 ms TTL has not expired after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Pipelines with sorted sets and hashes, as the registry and the reconciler use them.
	cmds, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, "hb:set", redis.Z{Score: 1, Member: "w1"}, redis.Z{Score: 2, Member: "w2"}, redis.Z{Score: 3, Member: "w3"})
		p.ZRangeByScore(ctx, "hb:set", &redis.ZRangeBy{Min: "-inf", Max: "2"})
		p.ZRem(ctx, "hb:set", "w1")
		p.ZRangeWithScores(ctx, "hb:set", 0, -1)
		p.HGetAll(ctx, "hb:a")
		p.Time(ctx)
		return nil
	})
	if err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	if got := cmds[1].(*redis.StringSliceCmd).Val(); strings.Join(got, ",") != "w1,w2" {
		t.Errorf("ZRANGEBYSCORE = %v", got)
	}
	if got := cmds[3].(*redis.ZSliceCmd).Val(); len(got) != 2 || got[0].Member != "w2" {
		t.Errorf("ZRANGE WITHSCORES after ZREM = %v", got)
	}
	if got := cmds[4].(*redis.MapStringStringCmd).Val(); got["token"] != "5" {
		t.Errorf("HGETALL = %v", got)
	}
	// SCAN with MATCH and COUNT, iterated to the end.
	for i := range 25 {
		rdb.Set(ctx, "dispatcher:heartbeat:"+string(rune('a'+i)), "x", time.Minute)
	}
	var keys []string
	iter := rdb.Scan(ctx, 0, "dispatcher:heartbeat:*", 10).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil || len(keys) != 25 {
		t.Errorf("SCAN MATCH found %d keys (%v), want 25", len(keys), err)
	}
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("%q is not a number", s)
		}
		n = n*10 + int64(r-'0')
	}
	return n
}

func readEnvFile(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			t.Fatalf("env file line %q is not NAME=value", sc.Text())
		}
		env[name] = value
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return env
}

func checkEtcd(t *testing.T, endpoints []string) {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(t.Context(), "devstack/smoke", "ok"); err != nil {
		t.Fatalf("etcd put: %v", err)
	}
	resp, err := cli.Get(t.Context(), "devstack/smoke")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "ok" {
		t.Fatalf("etcd get = %v %v", resp, err)
	}
}

func checkTemporal(t *testing.T, hostPort, namespace string) {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: hostPort, Namespace: namespace, Logger: nopLogger{}})
	if err != nil {
		t.Fatalf("temporal dial: %v", err)
	}
	defer c.Close()
	if _, err := c.CheckHealth(t.Context(), &client.CheckHealthRequest{}); err != nil {
		t.Fatalf("temporal health: %v", err)
	}
	resp, err := c.WorkflowService().DescribeNamespace(t.Context(), &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil || resp.GetNamespaceInfo().GetName() != namespace {
		t.Fatalf("describe namespace %s = %v %v", namespace, resp, err)
	}
}

func checkRedisPing(t *testing.T, addr string) {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	if err := rdb.Ping(t.Context()).Err(); err != nil {
		t.Fatalf("redis ping: %v", err)
	}
}

type nopLogger struct{}

func (nopLogger) Debug(string, ...any) {}
func (nopLogger) Info(string, ...any)  {}
func (nopLogger) Warn(string, ...any)  {}
func (nopLogger) Error(string, ...any) {}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    options
		wantErr string
	}{
		{"defaults", nil, options{servers: stack.Options{EtcdMembers: 1, Redis: stack.RedisAuto},
			temporal: temporalOptions{mode: temporalAuto}}, ""},
		{"all", []string{"-etcd-members=3", "-redis=inprocess", "-env-file=/tmp/x.env", "-quiet",
			"-temporal=cli", "-temporal-cli=/opt/temporal", "-temporal-port=7233", "-temporal-ui-port=8233"},
			options{servers: stack.Options{EtcdMembers: 3, Redis: stack.RedisInprocess}, envFile: "/tmp/x.env", quiet: true,
				temporal: temporalOptions{mode: temporalCLI, cli: "/opt/temporal", port: 7233, uiPort: 8233}}, ""},
		{"builtin on a port", []string{"-temporal=builtin", "-temporal-port=7233"},
			options{servers: stack.Options{EtcdMembers: 1, Redis: stack.RedisAuto}, temporal: temporalOptions{mode: temporalBuiltin, port: 7233}}, ""},
		{"no members", []string{"-etcd-members=0"}, options{}, "-etcd-members=0: want 1 to 9"},
		{"unknown redis mode", []string{"-redis=docker"}, options{}, `-redis="docker": want auto, real or inprocess`},
		{"positional argument", []string{"extra"}, options{}, "unexpected arguments"},
		{"unknown temporal mode", []string{"-temporal=docker"}, options{}, `-temporal="docker": want auto, cli or builtin`},
		{"builtin with a CLI", []string{"-temporal=builtin", "-temporal-cli=/opt/temporal"}, options{}, "-temporal-cli=/opt/temporal"},
		{"builtin with a UI", []string{"-temporal=builtin", "-temporal-ui-port=8233"}, options{}, "-temporal-ui-port=8233"},
		{"port out of range", []string{"-temporal-port=70000"}, options{}, "-temporal-port=70000"},
		{"negative port", []string{"-temporal-ui-port=-1"}, options{}, "-temporal-ui-port=-1"},
		{"one port twice", []string{"-temporal-port=7233", "-temporal-ui-port=7233"}, options{},
			"-temporal-ui-port=7233: port 7233 is -temporal-port=7233's already"},
		{"well-known ports", []string{"-fixed-ports"}, options{servers: stack.Options{EtcdMembers: 1, EtcdPort: 2379, RedisPort: 6379,
			Redis: stack.RedisAuto}, temporal: temporalOptions{mode: temporalAuto, port: 7233, wellKnownUI: true}}, ""},
		{"well-known ports but some", []string{"-fixed-ports", "-redis-port=0", "-etcd-port=12379", "-temporal-ui-port=9000"},
			options{servers: stack.Options{EtcdMembers: 1, EtcdPort: 12379, Redis: stack.RedisAuto},
				temporal: temporalOptions{mode: temporalAuto, port: 7233, uiPort: 9000}}, ""},
		{"ports of every server", []string{"-etcd-port=2379", "-etcd-members=3", "-redis-port=6379", "-temporal-port=7233"},
			options{servers: stack.Options{EtcdMembers: 3, EtcdPort: 2379, RedisPort: 6379, Redis: stack.RedisAuto},
				temporal: temporalOptions{mode: temporalAuto, port: 7233}}, ""},
		{"etcd members past the last port", []string{"-etcd-port=65535", "-etcd-members=2"}, options{},
			"-etcd-port=65535 with -etcd-members=2: member 1: port 65536"},
		{"etcd members over another port", []string{"-etcd-port=6378", "-etcd-members=2", "-redis-port=6379"}, options{},
			"-redis-port=6379: port 6379 is -etcd-port=6378 with -etcd-members=2: member 1's already"},
		{"well-known port twice", []string{"-fixed-ports", "-temporal-port=6379"}, options{},
			"-fixed-ports (-redis-port=6379): port 6379 is -temporal-port=6379's already"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseFlags(tc.args, &bytes.Buffer{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			type flags struct {
				members, etcdPort, redisPort int
				redis                        string
				temporal                     temporalOptions
				envFile                      string
				quiet                        bool
			}
			g := flags{got.servers.EtcdMembers, got.servers.EtcdPort, got.servers.RedisPort, got.servers.Redis, got.temporal,
				got.envFile, got.quiet}
			w := flags{tc.want.servers.EtcdMembers, tc.want.servers.EtcdPort, tc.want.servers.RedisPort, tc.want.servers.Redis,
				tc.want.temporal, tc.want.envFile, tc.want.quiet}
			if err != nil || g != w {
				t.Fatalf("parseFlags = %+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}

func TestWriteEnvFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "baton.env")
	vars := []stack.EnvVar{{Name: "A", Value: "http://127.0.0.1:1,http://127.0.0.1:2"}, {Name: "B", Value: "it's here"}, {Name: "C"}}
	for range 2 { // the second write replaces the first
		if err := writeEnvFile(path, vars); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "A=http://127.0.0.1:1,http://127.0.0.1:2\nB='it'\\''s here'\nC=''\n"
	if string(got) != want {
		t.Errorf("env file =\n%s\nwant\n%s", got, want)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("temp files left: %v", ents)
	}
}

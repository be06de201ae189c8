package fxmodule

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
)

var testConfig = baton.Config{Project: "billing", Queues: []string{"orders", "refunds"}}

// lazyClients are etcd and Temporal clients that never connect (nothing here starts the Node).
func lazyClients(t *testing.T) (*clientv3.Client, client.Client) {
	t.Helper()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	return etcd, tc
}

func redisAt(t *testing.T, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// The README's constructors return *redis.Client, as go-redis's do; Fx matches types exactly, so the
// module must take that type too rather than fail with "missing type: redis.UniversalClient".
func TestModuleTakesTheConcreteRedisClient(t *testing.T) {
	etcd, tc := lazyClients(t)
	var node *baton.Node
	fxtest.New(t, fx.NopLogger,
		fx.Supply(testConfig, etcd, fx.Annotate(tc, fx.As(new(client.Client)))),
		fx.Provide(func() *redis.Client { return redisAt(t, "127.0.0.1:1") }),
		Module, fx.Populate(&node))
	if node == nil {
		t.Fatal("no Node built")
	}
}

// An app that provides the SDK's *sdkmetric.MeterProvider (as most do) gets Baton's metrics there.
func TestModuleTakesTheSDKMeterProvider(t *testing.T) {
	etcd, tc := lazyClients(t)
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.WithoutCancel(t.Context())) })
	fxtest.New(t, fx.NopLogger,
		fx.Supply(testConfig, etcd, fx.Annotate(tc, fx.As(new(client.Client))), mp),
		fx.Provide(func() *redis.Client { return redisAt(t, "127.0.0.1:1") }),
		Module)
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(t.Context(), &rm); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			names = append(names, m.Name)
		}
	}
	if !strings.Contains(strings.Join(names, " "), baton.MetricLeader) {
		t.Fatalf("the SDK meter provider collected %v, want %s among them", names, baton.MetricLeader)
	}
}

// Without any meter provider the metrics are off, and the app's log says so.
func TestModuleSaysMetricsAreOff(t *testing.T) {
	etcd, tc := lazyClients(t)
	core, logs := observer.New(zap.WarnLevel)
	fxtest.New(t, fx.NopLogger,
		fx.Supply(testConfig, etcd, fx.Annotate(tc, fx.As(new(client.Client))), zap.New(core)),
		fx.Provide(func() *redis.Client { return redisAt(t, "127.0.0.1:1") }),
		Module)
	if logs.FilterMessageSnippet("metrics are off").Len() != 1 {
		t.Fatalf("want one warning that metrics are off, got %v", logs.All())
	}
}

// An app whose unnamed Redis is its cache gives Baton its own clients under the name "baton".
func TestModuleUsesTheClientsNamedBaton(t *testing.T) {
	etcd, tc := lazyClients(t)
	batonEtcd, batonTemporal := lazyClients(t)
	cache := redisAt(t, "127.0.0.1:1")
	own := redisAt(t, "127.0.0.1:2")
	var got struct {
		etcd     *clientv3.Client
		temporal client.Client
		rdb      redis.UniversalClient
	}
	var node *baton.Node
	fxtest.New(t, fx.NopLogger,
		fx.Supply(testConfig, etcd, fx.Annotate(tc, fx.As(new(client.Client))), cache),
		fx.Provide(
			fx.Annotate(func() redis.UniversalClient { return own }, fx.ResultTags(`name:"baton"`)),
			fx.Annotate(func() *clientv3.Client { return batonEtcd }, fx.ResultTags(`name:"baton"`)),
			fx.Annotate(func() client.Client { return batonTemporal }, fx.ResultTags(`name:"baton"`)),
		),
		Module,
		fx.Populate(&node),
		fx.Invoke(func(p NodeParams) (err error) {
			got.etcd, got.temporal, got.rdb, err = p.clients()
			return err
		}))
	if node == nil || got.etcd != batonEtcd || got.temporal != batonTemporal || got.rdb != own {
		t.Fatalf("Baton got etcd %p, Temporal %p, Redis %p; want the named ones %p, %p, %p",
			got.etcd, got.temporal, got.rdb, batonEtcd, batonTemporal, own)
	}
}

// Without a Redis client the app fails with what to provide, not with a Node over nil.
func TestModuleNamesTheMissingClient(t *testing.T) {
	etcd, tc := lazyClients(t)
	app := fx.New(fx.NopLogger, fx.Supply(testConfig, etcd, fx.Annotate(tc, fx.As(new(client.Client)))), Module)
	if err := app.Err(); !errors.Is(err, ErrMissingClient) || !strings.Contains(err.Error(), "Redis") {
		t.Fatalf("err = %v, want ErrMissingClient naming Redis", err)
	}
}

// A bad configuration fails once, in a constructor with a name, before any client is built.
func TestModuleValidatesInANamedConstructorBeforeClients(t *testing.T) {
	built := 0
	bad := baton.Config{Project: "billing"} // no queues
	app := fx.New(fx.NopLogger, fx.Supply(bad),
		fx.Provide(func() *clientv3.Client { built++; return nil },
			func() client.Client { built++; return nil },
			func() *redis.Client { built++; return nil }),
		Module)
	err := app.Err()
	if !errors.Is(err, baton.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, `fxmodule".ValidateConfig`) || strings.Contains(msg, "init.func") ||
		strings.Count(msg, "Queues") != 1 {
		t.Errorf("err = %v: want it raised once by fxmodule.ValidateConfig", err)
	}
	if built != 0 {
		t.Errorf("%d clients were built for a configuration that was refused", built)
	}
}

// Every listener of the value group reaches the Node before it starts: a listener added later would
// miss the first terms, so Listen refuses it after Start; here the group's listeners were accepted.
func TestModuleGivesTheNodeItsListeners(t *testing.T) {
	etcd, tc := lazyClients(t)
	built := 0
	newListener := func() baton.Listener { built++; return baton.Listener{OnNewLeader: func(string, election.Leader) {}} }
	var node *baton.Node
	fxtest.New(t, fx.NopLogger,
		fx.Supply(testConfig, etcd, fx.Annotate(tc, fx.As(new(client.Client)))),
		fx.Provide(func() *redis.Client { return redisAt(t, "127.0.0.1:1") }),
		fx.Provide(AsListener(newListener), AsListener(newListener)),
		Module, fx.Populate(&node))
	if node == nil || built != 2 {
		t.Fatalf("node %v, %d listeners built, want a node and 2", node, built)
	}
}

// The configuration is checked once, and the Node runs what was checked: a default ServerID is
// random, so a second check would have drawn another.
func TestModuleChecksTheConfigOnceAndRunsIt(t *testing.T) {
	etcd, tc := lazyClients(t)
	var checked baton.CheckedConfig
	var node *baton.Node
	fxtest.New(t, fx.NopLogger,
		fx.Supply(testConfig, etcd, fx.Annotate(tc, fx.As(new(client.Client)))),
		fx.Provide(func() *redis.Client { return redisAt(t, "127.0.0.1:1") }),
		Module, fx.Populate(&checked, &node))
	if id := checked.Config().ServerID; id == "" || node.Config().ServerID != id {
		t.Fatalf("checked ServerID %q, the Node runs %q", id, node.Config().ServerID)
	}
}

// Package fxmodule adds Baton to an Uber Fx application as one option.
//
// The application provides its etcd client (*clientv3.Client), Temporal client (client.Client), Redis
// client (redis.UniversalClient) and a baton.Config; a *zap.Logger, a metric.MeterProvider and a
// converter.DataConverter are used when provided. Applications without clients of their own add
// Clients and supply a clients.Config (package clients builds the clients; clients.LoadEnv reads it
// from the BATON_* variables).
//
// An application whose Temporal client has a data converter of its own (a codec that encrypts or
// compresses payloads) provides that converter too: Baton reads and writes each dispatcher run's
// owner memo with it, and a memo it cannot decode fails the takeover (takeover.ErrUnreadableOwner)
// instead of being read as token 0.
//
//	fx.New(
//		fx.Supply(baton.Config{Project: "billing", Queues: []string{"orders"}}),
//		fx.Provide(newEtcd, newTemporal, newRedis, zap.NewProduction),
//		fxmodule.Module,
//	)
//
// The Redis client may be a redis.UniversalClient, a *redis.Client or a *redis.ClusterClient, and the
// meter provider a metric.MeterProvider or the SDK's *sdkmetric.MeterProvider, as constructors
// usually return the concrete types. Without a meter provider Baton says once, at warn level, that
// its metrics are off.
//
// An application whose unnamed clients serve something else (a Redis used as a cache, another etcd)
// gives Baton its own under the name "baton"; a named client is used in place of the unnamed one of
// its kind:
//
//	fx.Provide(
//		newCacheRedis, // *redis.Client, the app's
//		fx.Annotate(newBatonRedis, fx.ResultTags(`name:"baton"`)), // Baton's
//	)
//
// Leadership listeners (baton.Listener: started leading, stopped leading, new leader, per queue) join
// the value group "baton.listeners"; AsListener annotates a constructor for it, and the Node gets every
// listener before it starts:
//
//	fx.Provide(fxmodule.AsListener(func(log *zap.Logger) baton.Listener {
//		return baton.Listener{OnStartedLeading: func(ctx context.Context, l baton.Lead) {
//			log.Info("leading", zap.String("queue", l.Queue), zap.Int64("token", l.Token))
//		}}
//	}))
//
// The Node starts with the app (Start returns at once) and stops with it: every term is resigned
// first so that another worker takes over in milliseconds, then every loop is stopped and waited for,
// within the app's stop timeout.
package fxmodule

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
)

// Module provides the *baton.Node and ties it to the app's lifecycle.
var Module = fx.Module("baton",
	fx.Provide(ValidateConfig, NewNode),
	fx.Invoke(runNode),
)

// runNode asks for the Node, so that it runs even when nothing else does; named, so that an error
// building the Node says where it came from.
func runNode(*baton.Node) {}

// ConfigParams are what ValidateConfig consumes: the app's baton.Config and what fills in its
// unset Logger, MeterProvider and Takeover.DataConverter.
type ConfigParams struct {
	fx.In
	Config        baton.Config
	Logger        *zap.Logger          `optional:"true"`
	MeterProvider metric.MeterProvider `optional:"true"`
	// SDKMeterProvider is taken when the app provides the SDK's concrete type and no
	// metric.MeterProvider: Fx matches types exactly, and that is what most apps provide.
	SDKMeterProvider *sdkmetric.MeterProvider `optional:"true"`
	// DataConverter is the Temporal client's data converter, when the app has one of its own.
	DataConverter converter.DataConverter `optional:"true"`
}

// ValidateConfig completes the app's baton.Config (the app's logger, meter provider and data
// converter fill in the Config's when it has none) and checks it, once. NewNode consumes its result
// before any client, so a bad configuration fails the app before a client is built and nothing is
// left running (Fx does not close what constructors made when a later one fails); the error names
// this function.
func ValidateConfig(p ConfigParams) (baton.CheckedConfig, error) {
	cfg := p.Config
	if cfg.Logger == nil {
		cfg.Logger = p.Logger
	}
	if cfg.MeterProvider == nil && p.MeterProvider != nil {
		cfg.MeterProvider = p.MeterProvider
	}
	if cfg.MeterProvider == nil && p.SDKMeterProvider != nil {
		cfg.MeterProvider = p.SDKMeterProvider
	}
	if cfg.Takeover.DataConverter == nil {
		cfg.Takeover.DataConverter = p.DataConverter
	}
	checked, err := cfg.Check()
	if err != nil {
		return baton.CheckedConfig{}, err
	}
	if cfg.MeterProvider == nil && cfg.Logger != nil {
		cfg.Logger.Warn("baton metrics are off: the app provides no metric.MeterProvider (or *sdkmetric.MeterProvider) and Config.MeterProvider is unset")
	}
	return checked, nil
}

// NodeParams are what NewNode consumes. Each client is taken from the value named "baton" when the
// app provides one, else from the unnamed one; the Redis client may be given as any of its types.
type NodeParams struct {
	fx.In
	// Config comes first: Fx builds the parameters in order, so the configuration is checked before
	// the clients are built.
	Config baton.CheckedConfig

	Etcd          *clientv3.Client      `optional:"true"`
	BatonEtcd     *clientv3.Client      `name:"baton" optional:"true"`
	Temporal      client.Client         `optional:"true"`
	BatonTemporal client.Client         `name:"baton" optional:"true"`
	Redis         redis.UniversalClient `optional:"true"`
	RedisClient   *redis.Client         `optional:"true"`
	RedisCluster  *redis.ClusterClient  `optional:"true"`
	BatonRedis    redis.UniversalClient `name:"baton" optional:"true"`

	// Listeners are the app's leadership listeners (see AsListener).
	Listeners []baton.Listener `group:"baton.listeners"`
	Lifecycle fx.Lifecycle
}

// ListenerGroup is the Fx value group whose baton.Listener values the Node delivers its leadership
// events to.
const ListenerGroup = "baton.listeners"

// AsListener annotates a constructor of a baton.Listener (any function Fx can call that returns one)
// so that its result joins ListenerGroup.
func AsListener(constructor any) any {
	return fx.Annotate(constructor, fx.ResultTags(`group:"`+ListenerGroup+`"`))
}

// ErrMissingClient is returned by NewNode when the app provides no client of a kind Baton needs.
var ErrMissingClient = errors.New("fxmodule: missing client")

// clients returns the clients Baton uses: the named ones first.
func (p NodeParams) clients() (*clientv3.Client, client.Client, redis.UniversalClient, error) {
	etcd := p.BatonEtcd
	if etcd == nil {
		etcd = p.Etcd
	}
	temporal := p.BatonTemporal
	if temporal == nil {
		temporal = p.Temporal
	}
	var rdb redis.UniversalClient
	switch {
	case p.BatonRedis != nil:
		rdb = p.BatonRedis
	case p.Redis != nil:
		rdb = p.Redis
	case p.RedisClient != nil:
		rdb = p.RedisClient
	case p.RedisCluster != nil:
		rdb = p.RedisCluster
	}
	var missing []string
	if etcd == nil {
		missing = append(missing, "an etcd client (*clientv3.Client)")
	}
	if temporal == nil {
		missing = append(missing, "a Temporal client (client.Client)")
	}
	if rdb == nil {
		missing = append(missing, "a Redis client (redis.UniversalClient, *redis.Client or *redis.ClusterClient)")
	}
	if len(missing) > 0 {
		return nil, nil, nil, fmt.Errorf("%w: provide %s, unnamed or named \"baton\" (or add fxmodule.Clients)",
			ErrMissingClient, strings.Join(missing, ", "))
	}
	return etcd, temporal, rdb, nil
}

// NewNode builds the Node over the checked configuration and the app's clients, and appends its
// Start and Stop to the lifecycle.
func NewNode(p NodeParams) (*baton.Node, error) {
	etcd, temporal, rdb, err := p.clients()
	if err != nil {
		return nil, err
	}
	node, err := baton.NewChecked(p.Config, etcd, temporal, rdb)
	if err != nil {
		return nil, err
	}
	for _, l := range p.Listeners {
		if err := node.Listen(l); err != nil {
			return nil, err
		}
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: node.Start,
		OnStop:  func(ctx context.Context) error { return node.Stop(ctx) },
	})
	return node, nil
}

// Package fxmodule adds Baton to an Uber Fx application as one option.
//
// The application provides its etcd client (*clientv3.Client), Temporal client (client.Client), Redis
// client (redis.UniversalClient) and a baton.Config; a *zap.Logger, a metric.MeterProvider and a
// converter.DataConverter are used when provided. Applications without clients of their own add
// Clients and supply a ClientConfig.
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
// The Node starts with the app (Start returns at once) and stops with it: every term is resigned
// first so that another worker takes over in milliseconds, then every loop is stopped and waited for,
// within the app's stop timeout.
package fxmodule

import (
	"context"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
)

// Module provides the *baton.Node and ties it to the app's lifecycle.
var Module = fx.Module("baton",
	fx.Provide(NewNode),
	// Validation comes first: a bad configuration fails the app before any client is built, so
	// nothing is left running (Fx does not close what constructors made when a later one fails).
	fx.Invoke(func(c baton.Config) error { return c.Validate() }),
	fx.Invoke(func(*baton.Node) {}), // the Node runs even when nothing else asks for it
)

// NodeParams are what NewNode consumes.
type NodeParams struct {
	fx.In
	Config        baton.Config
	Etcd          *clientv3.Client
	Temporal      client.Client
	Redis         redis.UniversalClient
	Logger        *zap.Logger          `optional:"true"`
	MeterProvider metric.MeterProvider `optional:"true"`
	// DataConverter is the Temporal client's data converter, when the app has one of its own.
	DataConverter converter.DataConverter `optional:"true"`
	Lifecycle     fx.Lifecycle
}

// NewNode builds the Node (the app's logger, meter provider and data converter fill in the Config's
// when it has none) and appends its Start and Stop to the lifecycle.
func NewNode(p NodeParams) (*baton.Node, error) {
	cfg := p.Config
	if cfg.Logger == nil {
		cfg.Logger = p.Logger
	}
	if cfg.MeterProvider == nil {
		cfg.MeterProvider = p.MeterProvider
	}
	if cfg.Takeover.DataConverter == nil {
		cfg.Takeover.DataConverter = p.DataConverter
	}
	node, err := baton.New(cfg, p.Etcd, p.Temporal, p.Redis)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: node.Start,
		OnStop:  func(ctx context.Context) error { return node.Stop(ctx) },
	})
	return node, nil
}

package fxmodule

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clients"
)

// Clients provides the etcd, Temporal and Redis clients from a clients.Config the app supplies, for
// applications that have none of their own, and closes them when the app stops.
var Clients = fx.Module("baton-clients",
	fx.Provide(NewEtcdClient, NewTemporalClient, NewRedisClient),
)

// ClientParams are what the client providers consume.
type ClientParams struct {
	fx.In
	Config clients.Config
	Logger *zap.Logger `optional:"true"`
	// DataConverter, when the app provides one, is the Temporal client's data converter (NodeParams
	// gives Baton the same one).
	DataConverter converter.DataConverter `optional:"true"`
	Lifecycle     fx.Lifecycle
}

// NewEtcdClient builds the etcd client with clients.NewEtcd (a refused TLS connection fails here
// with its reason) and closes it when the app stops.
func NewEtcdClient(p ClientParams) (*clientv3.Client, error) {
	// Fx calls constructors without a context: the TLS check is bounded by its own timeout.
	cli, err := clients.NewEtcd(context.Background(), p.Config, p.Logger)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StopHook(cli.Close))
	return cli, nil
}

// NewTemporalClient connects the Temporal client with clients.NewTemporal (lazily: an unreachable
// server does not fail the start, the takeover retries), with the app's data converter when it
// provides one, and closes it when the app stops.
func NewTemporalClient(p ClientParams) (client.Client, error) {
	tc, err := clients.NewTemporal(p.Config, p.Logger, p.DataConverter)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.StopHook(tc.Close))
	return tc, nil
}

// NewRedisClient builds the Redis client with clients.NewRedis and closes it when the app stops.
// When the app starts, it checks Redis once (clients.CheckRedis): a refusal of the credentials or of
// the TLS connection fails the start with its reason (retrying cannot fix either); an unreachable
// Redis only logs a warning, the loops retry.
func NewRedisClient(p ClientParams) (redis.UniversalClient, error) {
	rdb, err := clients.NewRedis(p.Config)
	if err != nil {
		return nil, err
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			err := clients.CheckRedis(ctx, rdb, p.Config)
			if errors.Is(err, clients.ErrRefused) {
				_ = rdb.Close() // Fx does not stop a hook whose start failed
				return err
			}
			if err != nil && p.Logger != nil {
				p.Logger.Named("redis-client").Warn("Redis not reachable at start; retrying in the background",
					zap.String("addr", p.Config.RedisTarget()), zap.Error(err))
			}
			return nil
		},
		OnStop: func(context.Context) error { return rdb.Close() },
	})
	return rdb, nil
}

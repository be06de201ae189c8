package opscli

import (
	"context"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"

	"github.com/baton-run/baton/clients"
)

// The commands build their clients with package clients, as the worker does, and close them with
// the other hooks when they end.

// Etcd builds an etcd client with clients.NewEtcd and keeps its Close for Stop.
func (h *Hooks) Etcd(ctx context.Context, cfg clients.Config) (*clientv3.Client, error) {
	cli, err := clients.NewEtcd(ctx, cfg, nil)
	if err != nil {
		return nil, err
	}
	h.Append(fx.StopHook(cli.Close))
	return cli, nil
}

// Temporal connects a Temporal client with clients.NewTemporal and keeps its Close for Stop.
func (h *Hooks) Temporal(cfg clients.Config) (client.Client, error) {
	tc, err := clients.NewTemporal(cfg, nil, nil)
	if err != nil {
		return nil, err
	}
	h.Append(fx.StopHook(tc.Close))
	return tc, nil
}

// Redis builds a Redis client with clients.NewRedis and keeps its Close for Stop. It does not
// connect: the first command fails with the reason when Redis refuses it.
func (h *Hooks) Redis(cfg clients.Config) (redis.UniversalClient, error) {
	rdb, err := clients.NewRedis(cfg)
	if err != nil {
		return nil, err
	}
	h.Append(fx.StopHook(rdb.Close))
	return rdb, nil
}

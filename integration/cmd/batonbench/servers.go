package main

import (
	"errors"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/redistest"
	"github.com/baton-run/baton/integration/temporalx"
)

// servers are the real servers a bench section measures against, with a client of each: a
// redis-server, an in-process Temporal server, and a client of the bench's etcd cluster. Each is
// started only when asked for.
type servers struct {
	redis    *redistest.Server
	rdb      *redis.Client
	temporal *temporalx.Server
	tc       client.Client
	etcd     *clientv3.Client
	closers  []func() error
}

type need struct{ redis, temporal, etcd bool }

func startServers(cluster *etcdtest.Cluster, n need) (s *servers, err error) {
	s = &servers{}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if n.redis {
		if s.redis, err = redistest.StartServer(redistest.Options{}); err != nil {
			return nil, err
		}
		s.rdb = s.redis.NewClient()
		s.closers = append(s.closers, s.redis.Close, s.rdb.Close)
	}
	if n.temporal {
		if s.temporal, err = temporalx.StartServer(temporalx.Options{}); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.temporal.Close)
		if s.tc, err = s.temporal.NewClient(); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error { s.tc.Close(); return nil })
	}
	if n.etcd {
		if s.etcd, err = cluster.NewClient(); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.etcd.Close)
	}
	return s, nil
}

// Close closes the clients, then stops the servers.
func (s *servers) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}

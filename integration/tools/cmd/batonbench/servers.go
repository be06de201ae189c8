package main

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"google.golang.org/grpc"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// servers are the real servers a bench section measures against, with a client of each: a
// redis-server, a Temporal server (temporalx: a child process), and a client of the bench's etcd cluster. Each is
// started only when asked for. Whatever a section makes through them is closed with them.
type servers struct {
	ctx      context.Context
	cluster  *etcdx.Cluster
	rdb      *redis.Client
	temporal *temporalx.Server
	tc       client.Client
	etcd     *clientv3.Client
	closers  []func() error
}

// need says which servers startServers starts.
type need struct {
	redis, temporal, etcd bool
	temporalConfig        map[string]any // the Temporal server's dynamic config
}

func startServers(ctx context.Context, cluster *etcdx.Cluster, n need) (_ *servers, err error) {
	s := &servers{ctx: ctx, cluster: cluster}
	defer func() {
		if err != nil {
			s.Close()
		}
	}()
	if n.redis {
		srv, err := redisx.StartServer(redisx.Options{})
		if err != nil {
			return nil, err
		}
		s.rdb = srv.NewClient()
		s.closers = append(s.closers, srv.Close, s.rdb.Close)
	}
	if n.temporal {
		if s.temporal, err = temporalx.StartServer(temporalx.Options{DynamicConfig: n.temporalConfig}); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, s.temporal.Close)
		if s.tc, err = s.temporal.NewClient(); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() error { s.tc.Close(); return nil })
	}
	if n.etcd {
		s.etcd, err = s.etcdClient()
	}
	return s, err
}

// Close closes the clients, then stops the servers.
func (s *servers) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}

// etcdClient is a client of its own to the bench's etcd cluster.
func (s *servers) etcdClient() (*clientv3.Client, error) {
	cli, err := s.cluster.NewClient()
	if err == nil {
		s.closers = append(s.closers, cli.Close)
	}
	return cli, err
}

// elector is an Elector on cli; closing it resigns its terms.
func (s *servers) elector(cli *clientv3.Client, cfg election.Config) (*election.Elector, error) {
	el, err := election.New(cli, cfg)
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() error {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.ctx), 10*time.Second)
		defer cancel()
		return el.Close(ctx)
	})
	return el, nil
}

// reconcilerTerm is the reconciler leadership of project, won on cli.
func (s *servers) reconcilerTerm(cli *clientv3.Client, project string) (*election.Term, error) {
	el, err := s.elector(cli, election.Config{Prefix: reconciler.DefaultElectionPrefix})
	if err != nil {
		return nil, err
	}
	return el.Campaign(s.ctx, project, reconciler.ElectionQueue, "bench-reconciler")
}

// A node is a dispatcher owner without a Node around it: an elector on an etcd client of its own and
// a takeover manager that leaves its run open when its term ends, for a successor to terminate.
type node struct {
	id  string
	el  *election.Elector
	mgr *takeover.Manager
}

// nodes are a node per server ID.
func (s *servers) nodes(ids ...string) ([]*node, error) {
	return s.nodesWith(takeover.Config{StepDown: takeover.LeaveRunning}, ids...)
}

// nodesWith are nodes whose takeover managers have cfg.
func (s *servers) nodesWith(cfg takeover.Config, ids ...string) ([]*node, error) {
	var ns []*node
	for _, id := range ids {
		cli, err := s.etcdClient()
		if err != nil {
			return nil, err
		}
		el, err := s.elector(cli, election.Config{})
		if err != nil {
			return nil, err
		}
		mgr, err := takeover.New(s.tc, cfg)
		if err != nil {
			return nil, err
		}
		ns = append(ns, &node{id, el, mgr})
	}
	return ns, nil
}

// take wins queue q of benchProject and takes its dispatcher over.
func (n *node) take(ctx context.Context, q string) (*election.Term, takeover.Run, error) {
	term, err := n.el.Campaign(ctx, benchProject, q, n.id)
	if err != nil {
		return nil, takeover.Run{}, err
	}
	run, err := n.mgr.Take(ctx, term)
	if err != nil {
		return nil, takeover.Run{}, fmt.Errorf("%s: %s's takeover: %w", q, n.id, err)
	}
	return term, run, nil
}

// counting is a gRPC dial option that counts, in n, the unary calls whose method passes keep.
func counting(n *atomic.Int64, keep func(method string) bool) grpc.DialOption {
	return grpc.WithChainUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn,
		invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if keep(method) {
			n.Add(1)
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	})
}

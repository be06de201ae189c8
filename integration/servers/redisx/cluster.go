package redisx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/integration/servers/harness"
)

// EnvClusterAddrs names the environment variable (comma-separated host:port seeds) that makes
// StartClusterServers use a running Redis Cluster instead of starting one; BATON_REDIS_PASSWORD
// applies to it too.
const EnvClusterAddrs = "BATON_REDIS_CLUSTER_ADDRS"

// ClusterOptions configures StartClusterServers.
type ClusterOptions struct {
	// Masters is the number of masters, each a redis-server process with a third of the slots (for
	// three). Default 3, the fewest redis-cli accepts.
	Masters int
	// Password, when set, is required of every client.
	Password string
	// LogFile is the file every master appends its log to (a line starts with its process ID);
	// default each its own, removed by Close.
	LogFile string
}

// Cluster is a Redis Cluster of masters without replicas on loopback (or an external cluster).
type Cluster struct {
	addrs    []string
	password string
	servers  []*Server
}

// StartClusterServers starts opts.Masters cluster-mode redis-servers on free loopback ports, joins
// them with redis-cli --cluster create, and returns once every node reports cluster_state:ok and
// knows every other.
func StartClusterServers(opts ClusterOptions) (*Cluster, error) {
	if v := strings.TrimSpace(os.Getenv(EnvClusterAddrs)); v != "" {
		c := &Cluster{addrs: strings.Split(v, ","), password: os.Getenv(EnvPassword)}
		return c, c.waitOK(DefaultTimeout, 0)
	}
	if opts.Masters == 0 {
		opts.Masters = 3
	}
	if opts.Masters < 3 {
		return nil, fmt.Errorf("redisx: ClusterOptions.Masters must be at least 3 (redis-cli --cluster create), got %d", opts.Masters)
	}
	cli, err := CLIBinary()
	if err != nil {
		return nil, err
	}
	c := &Cluster{password: opts.Password}
	for range opts.Masters {
		s, err := startLocal(Options{Password: opts.Password, LogFile: opts.LogFile, cluster: true})
		if err != nil {
			return nil, errors.Join(err, c.Close())
		}
		c.servers = append(c.servers, s)
		c.addrs = append(c.addrs, s.Addr())
	}
	args := append([]string{"--cluster", "create"}, c.addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if opts.Password != "" {
		args = append(args, "-a", opts.Password, "--no-auth-warning")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*DefaultTimeout)
	defer cancel()
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		return nil, errors.Join(fmt.Errorf("redisx: redis-cli --cluster create: %w\n%s", err, harness.Tail(string(out), 2000)), c.Close())
	}
	if err := c.waitOK(2*DefaultTimeout, opts.Masters); err != nil {
		return nil, errors.Join(err, c.Close())
	}
	return c, nil
}

// waitOK waits until every node says cluster_state:ok and, when nodes > 0, knows that many nodes.
func (c *Cluster) waitOK(timeout time.Duration, nodes int) error {
	for _, addr := range c.addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: c.password, Protocol: 2, DisableIdentity: true,
			MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		err := harness.Poll(context.Background(), timeout, 50*time.Millisecond, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			info, err := rdb.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			return clusterReady(info, nodes)
		})
		rdb.Close()
		if err != nil {
			return fmt.Errorf("redisx: cluster node %s not ready: %w", addr, err)
		}
	}
	return nil
}

func clusterReady(info string, nodes int) error {
	fields := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			fields[k] = v
		}
	}
	switch {
	case fields["cluster_state"] != "ok":
		return fmt.Errorf("cluster_state:%s", fields["cluster_state"])
	case fields["cluster_slots_ok"] != "16384":
		return fmt.Errorf("cluster_slots_ok:%s", fields["cluster_slots_ok"])
	case nodes > 0 && fields["cluster_known_nodes"] != fmt.Sprint(nodes):
		return fmt.Errorf("cluster_known_nodes:%s, want %d", fields["cluster_known_nodes"], nodes)
	}
	return nil
}

// Addrs returns the masters' host:port (the seeds, for an external cluster).
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// ClientOptions returns cluster client options; Protocol 2 as for a single server.
func (c *Cluster) ClientOptions() *redis.ClusterOptions {
	return &redis.ClusterOptions{Addrs: c.Addrs(), Password: c.password, Protocol: 2, DisableIdentity: true}
}

// NewClient returns a go-redis cluster client for the cluster.
func (c *Cluster) NewClient() *redis.ClusterClient { return redis.NewClusterClient(c.ClientOptions()) }

// Close stops every server and removes their working directories.
func (c *Cluster) Close() error {
	var errs []error
	for _, s := range c.servers {
		errs = append(errs, s.Close())
	}
	return errors.Join(errs...)
}

// StartCluster is StartClusterServers for tests: t.Fatal on error, Close on cleanup. Without
// opts.LogFile, the masters' log is kept (in harness.EnvLogDir) and named in t's output when t failed.
func StartCluster(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.LogFile == "" && os.Getenv(EnvClusterAddrs) == "" {
		opts.LogFile = harness.Log(t, "redis-cluster").Path
	}
	c, err := StartClusterServers(opts)
	return harness.Serve(t, c, err)
}

// ClusterClient returns c.NewClient() for tests, closed on cleanup. On an external cluster the
// test's keys are not isolated: tests use key prefixes of their own (see Prefix).
func ClusterClient(t testing.TB, c *Cluster) *redis.ClusterClient {
	t.Helper()
	cc := c.NewClient()
	t.Cleanup(func() { cc.Close() })
	return cc
}

// SpreadKeys returns n indexes i, each the first whose key(i) a master holds that none of the
// earlier ones does: keys spread over n masters, for tests that must reach every master.
func SpreadKeys(t testing.TB, cc *redis.ClusterClient, n int, key func(i int) string) []int {
	t.Helper()
	seen := map[string]bool{}
	var idx []int
	for i := 0; len(idx) < n; i++ {
		if i == 10_000 {
			t.Fatalf("redisx: the first %d keys are on %d masters, want %d", i, len(seen), n)
		}
		m, err := cc.MasterForKey(t.Context(), key(i))
		if err != nil {
			t.Fatal(err)
		}
		if addr := m.Options().Addr; !seen[addr] {
			seen[addr] = true
			idx = append(idx, i)
		}
	}
	return idx
}

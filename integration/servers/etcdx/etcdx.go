// Package etcdx starts real etcd servers in-process (go.etcd.io/etcd/server/v3/embed)
// for integration tests and benchmarks, and provides a TCP proxy (see Proxy) to
// partition or slow down a client's connection to etcd.
//
// Members listen on 127.0.0.1 with their own data dirs. Faults can be injected:
// StopMember simulates a crash (client connections are cut at once, no
// leadership transfer), RestartMember/Restart start members again on the same
// data dirs and ports, MoveLeader hands raft leadership over, SaveSnapshot and Restore take a
// backup and restore every member from it (etcdutl snapshot restore, with or without --bump-revision).
//
// When the environment variable BATON_ETCD_ENDPOINTS is set (comma-separated
// client URLs), StartCluster starts nothing and returns a Cluster over those
// endpoints; fault injection then returns ErrExternal.
package etcdx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/baton-run/baton/integration/servers/harness"
)

// EnvEndpoints names the environment variable that makes StartCluster use an
// already running etcd instead of starting one.
const EnvEndpoints = "BATON_ETCD_ENDPOINTS"

// DefaultTimeout bounds how long StartCluster, RestartMember and Restart wait
// for members to become ready and for a leader to be elected.
const DefaultTimeout = 30 * time.Second

// ErrExternal is returned by fault-injection methods of an external cluster.
var ErrExternal = errors.New("etcdx: cluster is external (" + EnvEndpoints + "); faults cannot be injected")

// Options configures StartCluster.
type Options struct {
	// Members is the number of members; default 1.
	Members int
	// ClientPort is member 0's client port on 127.0.0.1; member i listens on ClientPort+i. Default:
	// free ports. Peer ports are always free ones.
	ClientPort int
	// Dir is the parent dir of the members' data dirs (Dir/member0, ...).
	// Default: a new os.MkdirTemp dir, removed by Close. A Dir given here is
	// not removed by Close (the caller owns it, e.g. t.TempDir()).
	Dir string
	// Logger receives etcd's own logs; default zap.NewNop(). A StopMember shows up there as a crash
	// would (ERROR "setting up serving from embedded etcd failed" ... "mux: server closed").
	Logger *zap.Logger

	// Configure, if set, is called on every member's config right before each
	// start (including restarts), after etcdx has filled it in. Append to
	// cfg.GRPCAdditionalServerOptions rather than replace it: StopMember
	// relies on the transport credentials set there to cut client connections.
	Configure func(member int, cfg *embed.Config)
	// ClientTLS, when set, makes every member serve its clients over TLS only (https:// URLs); peers
	// still talk plain HTTP. embed then serves gRPC through its HTTPS server, so StopMember cannot
	// cut open client connections at once: they fail from the stop on and close with the servers.
	ClientTLS *transport.TLSInfo
	// ClientTLSConfig is what NewClient dials a ClientTLS cluster with; nil: no client certificate,
	// the system roots.
	ClientTLSConfig *tls.Config
}

// Cluster is a set of embedded etcd members (or an external etcd, see External).
type Cluster struct {
	mu        sync.Mutex
	opts      Options
	external  bool
	endpoints []string
	members   []*member
	root      string // parent of the data dirs
	removeDir bool   // root is ours (os.MkdirTemp) and is removed by Close
	token     string
	closed    bool
	bg        sync.WaitGroup // background parts of member stops
}

type member struct {
	name      string
	dir       string
	peerURL   url.URL
	clientURL url.URL
	etcd      *embed.Etcd  // nil while stopped
	conns     *connTracker // client connections of the current incarnation
}

// StartCluster starts opts.Members members on free loopback ports and returns
// once all are ready and a leader is elected (bounded by DefaultTimeout).
// If BATON_ETCD_ENDPOINTS is set, it starts nothing and returns an external
// cluster over those endpoints (opts.Members is then ignored).
func StartCluster(opts Options) (*Cluster, error) {
	if opts.Members <= 0 {
		opts.Members = 1
	}
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if env := strings.TrimSpace(os.Getenv(EnvEndpoints)); env != "" {
		eps := strings.FieldsFunc(env, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })
		if len(eps) == 0 {
			return nil, fmt.Errorf("etcdx: %s=%q has no endpoints", EnvEndpoints, env)
		}
		return &Cluster{opts: opts, external: true, endpoints: eps}, nil
	}

	c := &Cluster{opts: opts}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "etcdx-")
		if err != nil {
			return nil, fmt.Errorf("etcdx: %w", err)
		}
		c.root, c.removeDir = dir, true
	} else {
		if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
			return nil, fmt.Errorf("etcdx: %w", err)
		}
		c.root = opts.Dir
		for i := 0; i < opts.Members; i++ {
			if ents, _ := os.ReadDir(memberDir(c.root, i)); len(ents) > 0 {
				return nil, fmt.Errorf("etcdx: data dir %s is not empty", memberDir(c.root, i))
			}
		}
	}

	// A port picked as free can be taken by someone else before etcd binds
	// it; then start again from scratch on other ports.
	err := c.startNew()
	for attempt := 1; attempt < 3 && isAddrInUse(err); attempt++ {
		err = c.startNew()
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func memberDir(root string, i int) string { return filepath.Join(root, fmt.Sprintf("member%d", i)) }

// startNew picks ports, starts all members of a new cluster and waits for a leader.
// On failure it stops what it started and wipes the data dirs.
func (c *Cluster) startNew() error {
	n := c.opts.Members
	ports, err := harness.PickPorts(2 * n)
	if err != nil {
		return err
	}
	c.token = fmt.Sprintf("etcdx-%d-%d", os.Getpid(), rand.Int64())
	c.members, c.endpoints = make([]*member, n), make([]string, n)
	clientScheme := "http"
	if c.opts.ClientTLS != nil {
		clientScheme = "https"
	}
	for i := range c.members {
		if c.opts.ClientPort != 0 {
			ports[2*i] = c.opts.ClientPort + i
		}
		c.members[i] = &member{
			name:      fmt.Sprintf("m%d", i),
			dir:       memberDir(c.root, i),
			clientURL: url.URL{Scheme: clientScheme, Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i]))},
			peerURL:   url.URL{Scheme: "http", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[2*i+1]))},
		}
		c.endpoints[i] = c.members[i].clientURL.String()
	}
	if err = c.startAll(false); err == nil {
		return nil
	}
	for _, m := range c.members {
		m.stop(&c.bg)
	}
	c.bg.Wait()
	for _, m := range c.members {
		os.RemoveAll(m.dir)
	}
	c.members, c.endpoints = nil, nil
	return err
}

// startAll starts every member, then waits until all are ready and a leader
// is elected. Members are started one after the other: StartEtcd does not
// wait for readiness, and a new member probes its peers for 1s
// (BootstrapTimeout) if their ports listen but do not serve yet, which is
// what happens when members start concurrently; a port that does not listen
// yet answers at once.
func (c *Cluster) startAll(retryBind bool) error {
	deadline := time.Now().Add(DefaultTimeout)
	for i := range c.members {
		if err := c.startMember(i, deadline, retryBind); err != nil {
			return err
		}
	}
	for i, m := range c.members {
		if err := waitReady(m.etcd, deadline); err != nil {
			return fmt.Errorf("etcdx: member %d: %w", i, err)
		}
	}
	_, err := c.waitLeaderLocked(deadline)
	return err
}

func (c *Cluster) config(i int) *embed.Config {
	m := c.members[i]
	cfg := embed.NewConfig()
	cfg.Name = m.name
	cfg.Dir = m.dir
	cfg.ListenClientUrls = []url.URL{m.clientURL}
	cfg.AdvertiseClientUrls = []url.URL{m.clientURL}
	cfg.ListenPeerUrls = []url.URL{m.peerURL}
	cfg.AdvertisePeerUrls = []url.URL{m.peerURL}
	// Used only to bootstrap: on a restart the WAL exists and embed/etcdserver
	// take the membership from it and ignore InitialCluster/ClusterState.
	peers := make([]string, len(c.members))
	for j, o := range c.members {
		peers[j] = o.name + "=" + o.peerURL.String()
	}
	cfg.InitialCluster = strings.Join(peers, ",")
	cfg.InitialClusterToken = c.token
	cfg.ClusterState = embed.ClusterStateFlagNew
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(c.opts.Logger.With(zap.String("member", m.name)))
	// etcd defaults (100ms heartbeat, 1s election): reliable on a loaded 2-core machine.
	cfg.TickMs = 100
	cfg.ElectionMs = 1000
	// StopMember only simulates a process crash (the OS page cache survives), so no acknowledged
	// write is lost without fsync, and tests do not stall on disk flushes.
	cfg.UnsafeNoFsync = true
	// NewClient pings every 2s; the server default (5s) would answer with a
	// "too_many_pings" GOAWAY.
	cfg.GRPCKeepAliveMinTime = time.Second
	cfg.GRPCAdditionalServerOptions = []grpc.ServerOption{grpc.Creds(m.conns)}
	if c.opts.ClientTLS != nil {
		cfg.ClientTLSInfo = *c.opts.ClientTLS
	}
	if c.opts.Configure != nil {
		c.opts.Configure(i, cfg)
	}
	return cfg
}

// startMember starts member i (not waiting for readiness). With retryBind it
// retries while its ports are still (or already) taken, until deadline.
func (c *Cluster) startMember(i int, deadline time.Time, retryBind bool) error {
	m := c.members[i]
	for {
		m.conns = newConnTracker()
		e, err := embed.StartEtcd(c.config(i))
		if err == nil {
			m.etcd = e
			return nil
		}
		if !retryBind || !isAddrInUse(err) || time.Now().After(deadline) {
			return fmt.Errorf("etcdx: start member %d: %w", i, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func isAddrInUse(err error) bool {
	return err != nil && (errors.Is(err, syscall.EADDRINUSE) || strings.Contains(err.Error(), "address already in use"))
}

func waitReady(e *embed.Etcd, deadline time.Time) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("stopped before it was ready: %v", err)
	case <-e.Server.StopNotify():
		return errors.New("stopped before it was ready")
	case <-time.After(time.Until(deadline)):
		return errors.New("not ready in time (does a quorum of members run?)")
	}
}

// waitLeaderLocked polls until a running member leads, and returns its index.
func (c *Cluster) waitLeaderLocked(deadline time.Time) (int, error) {
	for {
		if i := c.leaderLocked(); i >= 0 {
			return i, nil
		}
		if time.Now().After(deadline) {
			return -1, errors.New("etcdx: no leader elected in time")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leaderLocked returns the index of the running member that leads by its own raft state, or -1.
func (c *Cluster) leaderLocked() int {
	for i, m := range c.members {
		if m.etcd != nil && m.etcd.Server.Leader() == m.etcd.Server.MemberID() {
			return i
		}
	}
	return -1
}

// stop hard-stops the member (like a crash): client connections are cut and
// refused at once, raft stops without transferring leadership (WAL and
// backend are closed when HardStop returns), the listeners are closed so the
// ports are free again. The rest of embed's Close (which waits up to 1s for
// peer connections to drain) runs in the background, tracked by bg.
func (m *member) stop(bg *sync.WaitGroup) {
	e := m.etcd
	if e == nil {
		return
	}
	m.etcd = nil
	m.conns.kill()
	e.Server.HardStop()
	for _, l := range e.Clients {
		l.Close()
	}
	for _, p := range e.Peers {
		p.Listener.Close()
	}
	bg.Go(e.Close)
}

// External reports whether the cluster is an external etcd (BATON_ETCD_ENDPOINTS).
func (c *Cluster) External() bool { return c.external }

// Size returns the number of members (of endpoints, for an external cluster).
func (c *Cluster) Size() int { return len(c.endpoints) }

// Endpoints returns the client URLs of all members, e.g. "http://127.0.0.1:PORT".
func (c *Cluster) Endpoints() []string { return append([]string(nil), c.endpoints...) }

// MemberEndpoint returns the client URL of member i. It panics if i is out of range.
func (c *Cluster) MemberEndpoint(i int) string { return c.endpoints[i] }

// NewClient returns a client of the given endpoints (default: all members),
// with DialTimeout 5s, keepalive 2s/2s, a nop logger and, for a ClientTLS
// cluster, Options.ClientTLSConfig. The caller closes it.
func (c *Cluster) NewClient(endpoints ...string) (*clientv3.Client, error) {
	if len(endpoints) == 0 {
		endpoints = c.Endpoints()
	}
	return clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          5 * time.Second,
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		Logger:               zap.NewNop(),
		TLS:                  c.opts.ClientTLSConfig,
	})
}

func (c *Cluster) checkMember(i int) error {
	if c.external {
		return ErrExternal
	}
	if c.closed {
		return errors.New("etcdx: cluster is closed")
	}
	if i < 0 || i >= len(c.members) {
		return fmt.Errorf("etcdx: member %d out of range [0,%d)", i, len(c.members))
	}
	return nil
}

// IsRunning reports whether member i is running (false for an external cluster).
func (c *Cluster) IsRunning(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.checkMember(i) == nil && c.members[i].etcd != nil
}

// Leader returns the index of the current leader, or -1 if none is known
// (or the cluster is external).
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leaderLocked() // none for an external cluster: it has no members
}

// WaitLeader waits up to timeout for a leader among the running members and
// returns its index.
func (c *Cluster) WaitLeader(timeout time.Duration) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.external {
		return -1, ErrExternal
	}
	return c.waitLeaderLocked(time.Now().Add(timeout))
}

// StopMember hard-stops member i, like a kill: its client connections are
// closed at once, raft stops without leadership transfer, listeners are
// closed. The data dir and ports are kept for RestartMember. Stopping a
// stopped member is a no-op.
func (c *Cluster) StopMember(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkMember(i); err != nil {
		return err
	}
	c.members[i].stop(&c.bg)
	return nil
}

// RestartMember starts member i again on the same data dir and ports (a
// running member is hard-stopped first). It returns when the member is ready
// to serve, which needs a quorum of running members; if fewer members than a
// quorum run (counting this one), it returns once the member is started and
// it becomes ready when enough members are back.
func (c *Cluster) RestartMember(i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkMember(i); err != nil {
		return err
	}
	m := c.members[i]
	m.stop(&c.bg)
	deadline := time.Now().Add(DefaultTimeout)
	if err := c.startMember(i, deadline, true); err != nil {
		return err
	}
	running := 0
	for _, o := range c.members {
		if o.etcd != nil {
			running++
		}
	}
	if running < len(c.members)/2+1 {
		return nil
	}
	if err := waitReady(m.etcd, deadline); err != nil {
		return fmt.Errorf("etcdx: member %d: %w", i, err)
	}
	return nil
}

// MoveLeader hands raft leadership to member to, as etcd's MoveLeader API does, and returns once
// to leads. Unlike a restart, no member stops: client connections stay up. A new leader extends
// every lease by its TTL plus the election timeout.
func (c *Cluster) MoveLeader(ctx context.Context, to int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.checkMember(to); err != nil {
		return err
	}
	deadline := time.Now().Add(DefaultTimeout)
	lead, err := c.waitLeaderLocked(deadline)
	if err != nil {
		return err
	}
	if lead == to {
		return nil
	}
	target := c.members[to].etcd
	if target == nil {
		return fmt.Errorf("etcdx: member %d is stopped", to)
	}
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	srv := c.members[lead].etcd.Server
	if err := srv.MoveLeader(ctx, uint64(srv.MemberID()), uint64(target.Server.MemberID())); err != nil {
		return fmt.Errorf("etcdx: move leader from member %d to %d: %w", lead, to, err)
	}
	return nil
}

// Restart stops all members and starts them again (same dirs and ports); it
// returns when all are ready and a leader exists.
func (c *Cluster) Restart() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.stopAllLocked(); err != nil {
		return err
	}
	return c.startAll(true)
}

// stopAllLocked stops every member of a cluster this package started (Restart, Restore); the
// caller holds mu.
func (c *Cluster) stopAllLocked() error {
	if err := c.checkMember(0); err != nil {
		return err
	}
	for _, m := range c.members {
		m.stop(&c.bg)
	}
	return nil
}

// Close stops all members and removes the temp dir (if StartCluster created
// it). It is idempotent and does nothing for an external cluster.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.external || c.closed {
		return nil
	}
	c.closed = true
	var wg sync.WaitGroup
	for _, m := range c.members {
		wg.Go(func() { m.stop(&c.bg) })
	}
	wg.Wait()
	c.bg.Wait()
	if c.removeDir {
		if err := os.RemoveAll(c.root); err != nil {
			return fmt.Errorf("etcdx: %w", err)
		}
	}
	return nil
}

// Start is StartCluster for tests: t.Fatal on error, Close on cleanup. Without opts.Logger, etcd's
// logs go to a file that is kept (in harness.EnvLogDir) and named in t's output when t failed.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Logger == nil && os.Getenv(EnvEndpoints) == "" {
		opts.Logger = harness.Log(t, "etcd").Logger
	}
	c, err := StartCluster(opts)
	return harness.Serve(t, c, err)
}

// Client returns c.NewClient(endpoints...) for tests: t.Fatal on error, closed on cleanup.
func Client(t testing.TB, c *Cluster, endpoints ...string) *clientv3.Client {
	t.Helper()
	cli, err := c.NewClient(endpoints...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// Client connection tracking: gRPC transport credentials (insecure) that
// remember every accepted connection, so that a member stop can cut them at
// once (embed's Close would otherwise wait for open watch / lease streams up
// to its request timeout) and refuse new ones.

var errMemberStopped = errors.New("etcdx: member stopped")

type connTracker struct {
	credentials.TransportCredentials
	mu     sync.Mutex
	conns  map[*trackedConn]struct{}
	killed bool
}

func newConnTracker() *connTracker {
	return &connTracker{TransportCredentials: insecure.NewCredentials(), conns: map[*trackedConn]struct{}{}}
}

func (t *connTracker) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := t.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.killed {
		conn.Close()
		return nil, nil, errMemberStopped
	}
	tc := &trackedConn{Conn: conn, t: t}
	t.conns[tc] = struct{}{}
	return tc, info, nil
}

// Clone shares the state: all copies belong to the same member incarnation.
func (t *connTracker) Clone() credentials.TransportCredentials { return t }

func (t *connTracker) kill() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.killed = true
	for c := range t.conns {
		c.Conn.Close()
	}
	clear(t.conns)
}

type trackedConn struct {
	net.Conn
	t *connTracker
}

func (c *trackedConn) Close() error {
	c.t.mu.Lock()
	delete(c.t.conns, c)
	c.t.mu.Unlock()
	return c.Conn.Close()
}

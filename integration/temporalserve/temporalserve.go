// Package temporalserve runs a Temporal server (go.temporal.io/server v1.32.1) with the configuration
// of the Temporal CLI's dev server: all four services in one process, SQLite persistence and
// visibility, one history shard, static single-host membership on fixed loopback ports.
//
// It is the only package of the integration module that links the server. cmd/temporal-dev runs it
// as the child process that temporalx (the tests, the benchmarks) and the drill start; cmd/devstack
// runs it in-process. A server started again on the same ports and database file is the same server:
// it comes back with its namespaces and executions, which is what a restart fault needs.
package temporalserve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"go.temporal.io/server/common/authorization"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	serverlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"go.uber.org/zap"

	"github.com/baton-run/baton/integration/temporalx"
	"github.com/baton-run/baton/integration/testkit"
)

// Host is the loopback address every service listens on.
const Host = "127.0.0.1"

// Config is one server's configuration.
type Config struct {
	// DB is the SQLite database file, created with the schema when it does not exist. Empty: an
	// in-memory database, gone with the server.
	DB string
	// Namespace is created at start when it does not exist yet; default "default".
	Namespace string
	// Ports of the services on Host; a zero port is picked free. Frontend is the one clients dial.
	Frontend, History, Matching, Worker int
	// DynamicConfig overrides the server's dynamic config (key -> value; keys are case-insensitive).
	// Numbers are seconds for duration settings; strings like "100ms" work too.
	DynamicConfig map[string]any
	// Logger receives the server's logs; default zap.NewNop().
	Logger *zap.Logger
}

// Server is a running server.
type Server struct {
	srv       temporal.Server
	hostPort  string
	namespace string
}

// Start starts the server and returns once its services run. The frontend then answers, but the
// namespace may still be unknown to it for a moment: temporalx.WaitReady waits for it.
func Start(c Config) (*Server, error) {
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	ports := []*int{&c.Frontend, &c.History, &c.Matching, &c.Worker}
	for _, p := range ports {
		if *p != 0 {
			continue
		}
		free, err := testkit.PickPorts(1)
		if err != nil {
			return nil, err
		}
		*p = free[0]
	}
	addr := func(p int) string { return Host + ":" + strconv.Itoa(p) }
	logger := serverlog.NewZapLogger(c.Logger)

	sqlConf := &config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: c.DB,
		// No fsync: the database must survive the process (a crash fault kills it), not the machine.
		ConnectAttributes: map[string]string{"mode": "rwc", "journal_mode": "wal", "synchronous": "off"}}
	if c.DB == "" {
		sqlConf.DatabaseName = "temporalserve-" + strconv.Itoa(c.Frontend)
		sqlConf.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
	} else if _, err := os.Stat(c.DB); errors.Is(err, os.ErrNotExist) {
		if err := sqliteschema.SetupSchema(sqlConf); err != nil {
			return nil, fmt.Errorf("temporalserve: schema of %s: %w", c.DB, err)
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig("active", c.Namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("temporalserve: namespace %q: %w", c.Namespace, err)
	}
	if err := sqliteschema.CreateNamespaces(sqlConf, ns); err != nil {
		return nil, fmt.Errorf("temporalserve: namespace %q: %w", c.Namespace, err)
	}

	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = Host
	conf.Persistence.DefaultStore = "sqlite-default"
	conf.Persistence.VisibilityStore = "sqlite-default"
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{"sqlite-default": {SQL: sqlConf}}
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{"active": {
			Enabled: true, InitialFailoverVersion: 1, RPCAddress: addr(c.Frontend),
		}},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	svc := func(p int) config.Service {
		var s config.Service
		s.RPC.GRPCPort, s.RPC.BindOnIP = p, Host
		return s
	}
	conf.Services = map[string]config.Service{
		"frontend": svc(c.Frontend), "history": svc(c.History), "matching": svc(c.Matching), "worker": svc(c.Worker),
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = addr(c.Frontend)

	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return nil, err
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return nil, err
	}
	dc := dynamicconfig.StaticClient{
		// As temporaltest: a search attribute added by a test is visible to its next query.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
	}
	for k, v := range c.DynamicConfig {
		dc[dynamicconfig.MakeKey(k)] = v
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(&conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(map[primitives.ServiceName]static.Hosts{
			primitives.FrontendService: static.SingleLocalHost(addr(c.Frontend)),
			primitives.HistoryService:  static.SingleLocalHost(addr(c.History)),
			primitives.MatchingService: static.SingleLocalHost(addr(c.Matching)),
			primitives.WorkerService:   static.SingleLocalHost(addr(c.Worker)),
		}),
		temporal.WithLogger(logger),
		temporal.WithAuthorizer(authorizer),
		temporal.WithClaimMapper(func(*config.Config) authorization.ClaimMapper { return claimMapper }),
		temporal.WithDynamicConfigClient(dc),
	)
	if err != nil {
		return nil, fmt.Errorf("temporalserve: %w", err)
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("temporalserve: start: %w", err)
	}
	return &Server{srv: srv, hostPort: addr(c.Frontend), namespace: c.Namespace}, nil
}

// StartReady is Start, then temporalx.WaitReady: it returns once the namespace is usable, bounded
// by ctx (and temporalx.DefaultTimeout). cmd/devstack and cmd/demo run the server in-process so:
// nothing more to build. The server leaves goroutines behind when it stops, so a test process runs
// temporalx's child instead.
func StartReady(ctx context.Context, c Config) (*Server, error) {
	s, err := Start(c)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, temporalx.DefaultTimeout)
	defer cancel()
	if err := temporalx.WaitReady(ctx, s.HostPort(), s.Namespace()); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// HostPort is the frontend's address, Host:Frontend.
func (s *Server) HostPort() string { return s.hostPort }

// Namespace is Config.Namespace.
func (s *Server) Namespace() string { return s.namespace }

// Stop stops the services. v1.32.1 does not end every goroutine it started: a process that runs
// the server in-process and checks for leaked goroutines runs it in a child process instead
// (temporalx).
func (s *Server) Stop() error { return s.srv.Stop() }

// Close is Stop (the in-memory database, if any, goes with it).
func (s *Server) Close() error { return s.Stop() }

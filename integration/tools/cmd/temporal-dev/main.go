// Command temporal-dev runs a Temporal server (go.temporal.io/server v1.32.1) with the configuration
// of the Temporal CLI's dev server until SIGTERM or SIGINT: all four services in one process, SQLite
// persistence and visibility, one history shard, static single-host membership on fixed loopback
// ports. It is the only package of the integration module that links the server.
//
// temporalx starts it as a child process for the integration tests, the benchmarks, the drill,
// devstack and the demo, so that their binaries do not link the server and the server does not run
// under their race detector. A server started again on the same ports and database file is the same
// server: it comes back with its namespaces and executions, which is what a restart fault needs. By
// hand:
//
//	go run ./tools/cmd/temporal-dev -db /tmp/temporal.db -frontend-port 7233
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

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
	"go.uber.org/zap/zapcore"
	"gopkg.in/yaml.v3"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

// host is the loopback address every service listens on.
const host = "127.0.0.1"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-dev:", err)
		os.Exit(1)
	}
}

// serverConfig is one server's configuration.
type serverConfig struct {
	db, namespace                       string
	frontend, history, matching, worker int // ports on host; 0 picks a free one
	dynamicConfig                       map[string]any
	logger                              *zap.Logger
}

func run(args []string) error {
	var c serverConfig
	fs := flag.NewFlagSet("temporal-dev", flag.ContinueOnError)
	fs.StringVar(&c.db, "db", "", "SQLite database `file` (required), created when missing; a server started again on it keeps its data")
	fs.StringVar(&c.namespace, "namespace", "default", "namespace created at start when missing")
	fs.IntVar(&c.frontend, "frontend-port", 0, "frontend port on "+host+", the one clients dial (default: a free one)")
	fs.IntVar(&c.history, "history-port", 0, "history service port (default: a free one)")
	fs.IntVar(&c.matching, "matching-port", 0, "matching service port (default: a free one)")
	fs.IntVar(&c.worker, "worker-port", 0, "worker service port (default: a free one)")
	dynamic := fs.String("dynamic-config", "", `dynamic config overrides, a YAML (or JSON) mapping, e.g. {"history.workflowIdReuseMinimalInterval": "100ms"}; keys are case-insensitive, numbers are seconds for duration settings`)
	level := zap.InfoLevel
	fs.Var(&level, "log-level", "level of the server's log on stderr")
	exitWithStdin := fs.Bool("exit-with-stdin", false, "exit at once when stdin closes: the process that started the server holds the other end, so the server ends with it, even when that process is killed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 || c.db == "" {
		return fmt.Errorf("want -db and no arguments, got -db=%q %q", c.db, fs.Args())
	}
	// YAML, of which JSON is a part, because the server's settings take an int or a float: YAML
	// makes a whole number an int, where encoding/json makes every number a float64.
	if err := yaml.Unmarshal([]byte(*dynamic), &c.dynamicConfig); err != nil {
		return fmt.Errorf("-dynamic-config: want a mapping of setting -> value: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	c.logger = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), level))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if *exitWithStdin {
		// The process exits from here: nothing is left to stop for a starter that is gone.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			c.logger.Warn("stdin closed: the starter is gone, exiting")
			os.Exit(1)
		}()
	}
	srv, err := startServer(&c)
	if err != nil {
		return err
	}
	c.logger.Info("temporal-dev serving", zap.String("frontend", addr(c.frontend)), zap.String("namespace", c.namespace), zap.String("db", c.db))
	sig := <-sigs
	c.logger.Info("temporal-dev stopping", zap.Stringer("signal", sig))
	if err := harness.Within(20*time.Second, srv.Stop); err != nil {
		return fmt.Errorf("server stop: %w", err)
	}
	return nil
}

func addr(port int) string { return host + ":" + strconv.Itoa(port) }

// startServer starts the server and returns once its services run, its free ports picked into c.
// The frontend then answers, but the namespace may still be unknown to it for a moment: temporalx
// waits for it.
func startServer(c *serverConfig) (temporal.Server, error) {
	for _, p := range []*int{&c.frontend, &c.history, &c.matching, &c.worker} {
		if *p != 0 {
			continue
		}
		free, err := harness.PickPorts(1)
		if err != nil {
			return nil, err
		}
		*p = free[0]
	}
	logger := serverlog.NewZapLogger(c.logger)

	sqlConf := &config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: c.db,
		// No fsync: the database must survive the process (a crash fault kills it), not the machine.
		ConnectAttributes: map[string]string{"mode": "rwc", "journal_mode": "wal", "synchronous": "off"}}
	if _, err := os.Stat(c.db); errors.Is(err, os.ErrNotExist) {
		if err := sqliteschema.SetupSchema(sqlConf); err != nil {
			return nil, fmt.Errorf("schema of %s: %w", c.db, err)
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig("active", c.namespace, false, nil)
	if err != nil {
		return nil, fmt.Errorf("namespace %q: %w", c.namespace, err)
	}
	if err := sqliteschema.CreateNamespaces(sqlConf, ns); err != nil {
		return nil, fmt.Errorf("namespace %q: %w", c.namespace, err)
	}

	var conf config.Config
	conf.Global.Membership.MaxJoinDuration = 30 * time.Second
	conf.Global.Membership.BroadcastAddress = host
	conf.Persistence.DefaultStore = "sqlite-default"
	conf.Persistence.VisibilityStore = "sqlite-default"
	conf.Persistence.NumHistoryShards = 1
	conf.Persistence.DataStores = map[string]config.DataStore{"sqlite-default": {SQL: sqlConf}}
	conf.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        "active",
		CurrentClusterName:       "active",
		ClusterInformation: map[string]cluster.ClusterInformation{"active": {
			Enabled: true, InitialFailoverVersion: 1, RPCAddress: addr(c.frontend),
		}},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	svc := func(p int) config.Service {
		var s config.Service
		s.RPC.GRPCPort, s.RPC.BindOnIP = p, host
		return s
	}
	conf.Services = map[string]config.Service{
		"frontend": svc(c.frontend), "history": svc(c.history), "matching": svc(c.matching), "worker": svc(c.worker),
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = addr(c.frontend)

	dc := dynamicconfig.StaticClient{
		// As temporaltest: a search attribute added by a test is visible to its next query.
		dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		// Production servers want it too (see the README).
		dynamicconfig.MakeKey(temporalx.CancelPollsOnShutdown): true,
	}
	if dynamicconfig.EnableCancelWorkerPollsOnShutdown.Key() != dynamicconfig.MakeKey(temporalx.CancelPollsOnShutdown) {
		return nil, fmt.Errorf("this Temporal server names the setting %s %q, not %q",
			"EnableCancelWorkerPollsOnShutdown", dynamicconfig.EnableCancelWorkerPollsOnShutdown.Key(), temporalx.CancelPollsOnShutdown)
	}
	for k, v := range c.dynamicConfig {
		dc[dynamicconfig.MakeKey(k)] = v
	}
	// No authorizer or claim mapper: the server then lets every call through, as the no-op ones of
	// the dev server's empty authorization config do.
	srv, err := temporal.NewServer(
		temporal.WithConfig(&conf),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(map[primitives.ServiceName]static.Hosts{
			primitives.FrontendService: static.SingleLocalHost(addr(c.frontend)),
			primitives.HistoryService:  static.SingleLocalHost(addr(c.history)),
			primitives.MatchingService: static.SingleLocalHost(addr(c.matching)),
			primitives.WorkerService:   static.SingleLocalHost(addr(c.worker)),
		}),
		temporal.WithLogger(logger),
		temporal.WithDynamicConfigClient(dc),
	)
	if err != nil {
		return nil, err
	}
	if err := srv.Start(); err != nil {
		return nil, fmt.Errorf("start: %w", err)
	}
	return srv, nil
}

package drill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/baton-run/baton/integration/etcdtest"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
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
	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton/integration/temporalx"
)

// Why a child process and a SQLite file, not temporalx: the drill restarts Temporal, and a restart
// only means something if the server comes back on the same address with the same executions.
// temporalx (temporaltest) keeps everything in an in-memory SQLite database and picks new ports on
// every start, so a "restarted" in-process server is a new, empty server: every dispatcher run would
// be gone. Here the server (go.temporal.io/server v1.32.1, the version the integration module already
// builds) runs in a child process with the configuration of the Temporal CLI's dev server (SQLite
// file, static single-host membership, fixed ports): a restart stops the process, SIGTERM or SIGKILL,
// and starts it again on the same ports and file. The child is this very executable (the drill
// command or the test binary) started with envTemporalChild set: nothing to install, nothing more to
// build.

// envTemporalChild, when set (to the JSON of a temporalChild), makes ServeTemporalIfChild run the
// Temporal server in this process instead of returning.
const envTemporalChild = "DRILL_TEMPORAL_CHILD"

// temporalChild is the configuration of the child server process.
type temporalChild struct {
	DB        string `json:"db"`
	Namespace string `json:"namespace"`
	Frontend  int    `json:"frontend"`
	HTTP      int    `json:"http"`
	History   int    `json:"history"`
	Matching  int    `json:"matching"`
	Worker    int    `json:"worker"`
}

// ServeTemporalIfChild returns at once unless this process was started by the drill as its Temporal
// server; then it serves until SIGTERM or SIGINT and exits the process. The drill command's main and
// the drill test's TestMain call it first.
func ServeTemporalIfChild() {
	v := os.Getenv(envTemporalChild)
	if v == "" {
		return
	}
	var c temporalChild
	if err := json.Unmarshal([]byte(v), &c); err != nil {
		fmt.Fprintf(os.Stderr, "drill temporal child: %s: %v\n", envTemporalChild, err)
		os.Exit(2)
	}
	if err := serveTemporal(c); err != nil {
		fmt.Fprintf(os.Stderr, "drill temporal child: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveTemporal(c temporalChild) error {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	zl := zap.New(zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(os.Stderr), zapcore.WarnLevel))
	logger := serverlog.NewZapLogger(zl)

	const host = "127.0.0.1"
	addr := func(p int) string { return host + ":" + strconv.Itoa(p) }
	sqlConf := &config.SQL{PluginName: sqliteplugin.PluginName, DatabaseName: c.DB,
		ConnectAttributes: map[string]string{"mode": "rwc"}}
	if _, err := os.Stat(c.DB); errors.Is(err, os.ErrNotExist) {
		if err := sqliteschema.SetupSchema(sqlConf); err != nil {
			return fmt.Errorf("schema: %w", err)
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig("active", c.Namespace, false, nil)
	if err != nil {
		return err
	}
	if err := sqliteschema.CreateNamespaces(sqlConf, ns); err != nil {
		return fmt.Errorf("namespace: %w", err)
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
			Enabled: true, InitialFailoverVersion: 1, RPCAddress: addr(c.Frontend), HTTPAddress: addr(c.HTTP),
		}},
	}
	conf.DCRedirectionPolicy.Policy = "noop"
	svc := func(p, httpPort int) config.Service {
		var s config.Service
		s.RPC.GRPCPort, s.RPC.BindOnIP, s.RPC.HTTPPort = p, host, httpPort
		return s
	}
	conf.Services = map[string]config.Service{
		"frontend": svc(c.Frontend, c.HTTP), "history": svc(c.History, 0),
		"matching": svc(c.Matching, 0), "worker": svc(c.Worker, 0),
	}
	conf.Archival.History.State = "disabled"
	conf.Archival.Visibility.State = "disabled"
	conf.NamespaceDefaults.Archival.History.State = "disabled"
	conf.NamespaceDefaults.Archival.Visibility.State = "disabled"
	conf.PublicClient.HostPort = addr(c.Frontend)

	authorizer, err := authorization.GetAuthorizerFromConfig(&conf.Global.Authorization)
	if err != nil {
		return err
	}
	claimMapper, err := authorization.GetClaimMapperFromConfig(&conf.Global.Authorization, logger)
	if err != nil {
		return err
	}
	dc := dynamicconfig.StaticClient{
		// The drill reads visibility several times a second; the default is 10 per second.
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key():        1000,
		dynamicconfig.FrontendMaxNamespaceVisibilityBurstRatioPerInstance.Key(): 1,
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
		return err
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	zl.Warn("drill temporal child serving", zap.Int("frontend", c.Frontend))
	<-sigs
	zl.Warn("drill temporal child stopping")
	done := make(chan error, 1)
	go func() { done <- srv.Stop() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		return errors.New("server stop took more than 20s")
	}
}

// temporalServer is the Temporal server the workers use: a child process the drill can restart, or an
// external server (BATON_TEMPORAL_ADDRESS), which cannot be restarted.
type temporalServer struct {
	external  *temporalx.Server
	exe       string
	child     temporalChild
	logPath   string
	hostPort  string
	namespace string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// startTemporal starts the child server (or wraps the external one) and waits until the namespace
// is usable.
func startTemporal(ctx context.Context, dir, namespace string, timeout time.Duration) (*temporalServer, error) {
	if os.Getenv(temporalx.EnvAddress) != "" {
		ext, err := temporalx.StartServer(temporalx.Options{})
		if err != nil {
			return nil, err
		}
		return &temporalServer{external: ext, hostPort: ext.HostPort(), namespace: ext.Namespace()}, nil
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	ports, err := etcdtest.PickPorts(5)
	if err != nil {
		return nil, err
	}
	t := &temporalServer{
		exe:     exe,
		child:   temporalChild{DB: filepath.Join(dir, "temporal.db"), Namespace: namespace, Frontend: ports[0], HTTP: ports[1], History: ports[2], Matching: ports[3], Worker: ports[4]},
		logPath: filepath.Join(dir, "temporal.log"),
	}
	t.hostPort = "127.0.0.1:" + strconv.Itoa(t.child.Frontend)
	t.namespace = namespace
	if err := t.start(ctx, timeout); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

func (t *temporalServer) canRestart() bool { return t.external == nil }

func (t *temporalServer) start(ctx context.Context, timeout time.Duration) error {
	cfg, _ := json.Marshal(t.child)
	logf, err := os.OpenFile(t.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(t.exe)
	cmd.Env = append(cleanEnv(), envTemporalChild+"="+string(cfg))
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group (a Ctrl-C reaches the drill, which stops the server itself); killed
	// with the drill.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start temporal child: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(done) }()
	t.mu.Lock()
	t.cmd, t.done = cmd, done
	t.mu.Unlock()
	return t.waitReady(ctx, timeout, done)
}

// waitReady waits until the frontend answers and the namespace is known to frontend and history: a
// describe of a workflow that does not exist then fails with NotFound, not NamespaceNotFound.
func (t *temporalServer) waitReady(ctx context.Context, timeout time.Duration, exited <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		select {
		case <-exited:
			return fmt.Errorf("temporal child exited before it was ready (log: %s): %s", t.logPath, tailFile(t.logPath, 1500))
		default:
		}
		c, err := client.Dial(client.Options{HostPort: t.hostPort, Namespace: t.namespace, Logger: quietLogger{}})
		if err == nil {
			rctx, rcancel := context.WithTimeout(ctx, 3*time.Second)
			_, err = c.WorkflowService().DescribeWorkflowExecution(rctx, &workflowservice.DescribeWorkflowExecutionRequest{
				Namespace: t.namespace, Execution: &commonpb.WorkflowExecution{WorkflowId: "drill-namespace-probe"}})
			rcancel()
			c.Close()
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				return nil
			}
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("temporal on %s not ready: %v (last: %v)", t.hostPort, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// stop ends the child: SIGTERM (a graceful server stop, SIGKILL after 25 s) or SIGKILL (a crash).
func (t *temporalServer) stop(crash bool) {
	t.mu.Lock()
	cmd, done := t.cmd, t.done
	t.cmd = nil
	t.mu.Unlock()
	if cmd == nil {
		return
	}
	if crash {
		_ = cmd.Process.Signal(syscall.SIGKILL)
	} else {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	select {
	case <-done:
	case <-time.After(25 * time.Second):
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// restart stops the server, waits down, and starts it again on the same ports and database.
func (t *temporalServer) restart(ctx context.Context, crash bool, down, timeout time.Duration) error {
	if !t.canRestart() {
		return temporalx.ErrExternal
	}
	t.stop(crash)
	if !sleepCtx(ctx, down) {
		return ctx.Err()
	}
	deadline := time.Now().Add(timeout)
	for {
		err := t.start(ctx, time.Until(deadline))
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		// A port taken in between by someone else: try again while the budget lasts.
		t.stop(true)
		if !sleepCtx(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
}

func (t *temporalServer) close() {
	if t.external != nil {
		_ = t.external.Close()
		return
	}
	t.stop(false)
}

// quietLogger keeps the SDK client's own logs out of the drill's output.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

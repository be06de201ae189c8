// Package temporalx runs a real Temporal server for integration tests, benchmarks, the drill and the
// dev servers (package stack): the server of tools/cmd/temporal-dev (go.temporal.io/server v1.32.1, the
// Temporal CLI dev server's configuration, SQLite) in a child process on free loopback ports.
//
// Out of process, so that a test binary does not link the server (a quarter of a gigabyte, half a
// minute of linking under -race) and the server does not run under the test's race detector, taking
// the CPU that the tests' short etcd TTLs need. The child ends with its starter: it exits when the
// pipe on its stdin closes, which the kernel does when the starter dies, however it dies.
//
// The binary is the one named by TEMPORALX_SERVER_BIN (scripts/test.sh builds it once); without
// it, the first server of a process builds tools/cmd/temporal-dev into the user's cache directory (once for
// all processes: go build runs under a file lock and does nothing when the binary is up to date).
//
// When the environment variable BATON_TEMPORAL_ADDRESS is set (host:port), StartServer starts nothing
// and uses that server; the namespace is then taken from BATON_TEMPORAL_NAMESPACE (default "default")
// and Stop returns ErrExternal.
//
// The package is named temporalx so that it does not clash with the upstream package name
// temporaltest.
package temporalx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"
	"gopkg.in/yaml.v3"

	"github.com/baton-run/baton/integration/servers/harness"
)

// EnvAddress names the environment variable that makes StartServer use an
// already running Temporal server (host:port) instead of starting one.
const EnvAddress = "BATON_TEMPORAL_ADDRESS"

// EnvNamespace names the environment variable with the namespace to use on
// the external server of EnvAddress; default "default".
const EnvNamespace = "BATON_TEMPORAL_NAMESPACE"

// DefaultNamespace is the namespace used when Options.Namespace is empty.
const DefaultNamespace = "default"

// DefaultTimeout bounds how long StartServer waits for the server to serve
// and for the namespace to be usable.
const DefaultTimeout = 60 * time.Second

// ErrExternal is returned by Stop for an external server.
var ErrExternal = errors.New("temporalx: server is external (" + EnvAddress + "); it cannot be stopped")

var errExited = errors.New("temporalx: server process exited before it served")

// Options configures StartServer.
type Options struct {
	// Namespace is created on the server (if it does not exist yet) and
	// used by NewClient; default "default". Ignored for an external server
	// (BATON_TEMPORAL_NAMESPACE is used instead).
	Namespace string
	// Logger receives the logs of the SDK clients made by NewClient;
	// default zap.NewNop().
	Logger *zap.Logger
	// LogFile is the file the server's own log is appended to; default:
	// none (Start and Main choose one, see there).
	LogFile string
	// FrontendPort is the frontend's port on 127.0.0.1, the one clients dial; default a free one.
	// The server's other ports are always picked free.
	FrontendPort int
	// Dir holds the server's SQLite database, which Close leaves there: a
	// server started later on the same Dir finds the namespaces and
	// executions. Default: a temporary directory that Close removes.
	Dir string
	// DynamicConfig overrides (key -> value) for the server, e.g.
	// "history.workflowIdReuseMinimalInterval": 0 (numbers are seconds for
	// duration settings; time.Duration and strings like "100ms" work too).
	// Keys are case-insensitive. Default: none (production defaults, plus
	// temporaltest's system.forceSearchAttributesCacheRefreshOnRead=true).
	DynamicConfig map[string]any
}

// Server is a Temporal server in a child process (or an external one, see External).
type Server struct {
	opts      Options
	external  bool
	hostPort  string
	namespace string
	dir       string   // the database's directory
	bin       string   // cmd/temporal-dev
	args      []string // the same for every start: a restart is the same server

	child     harness.Child
	closeOnce sync.Once

	log      *harness.LogFile // where the server logs, when Main chose the file
	logNamed sync.Map         // the tests Client named it to
}

// StartServer starts a Temporal server in a child process, its frontend on
// 127.0.0.1 (on a free port, or on opts.FrontendPort), and returns once the frontend serves and
// opts.Namespace is usable (bounded by DefaultTimeout).
//
// If BATON_TEMPORAL_ADDRESS is set, it starts nothing; it registers the
// namespace on that server if it does not exist yet.
func StartServer(opts Options) (*Server, error) {
	if strings.TrimSpace(os.Getenv(EnvAddress)) == "" {
		if _, err := serverBinary(); err != nil { // a build does not count against DefaultTimeout
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), DefaultTimeout)
	defer cancel()
	return StartServerContext(ctx, opts)
}

// StartServerContext is StartServer bounded by ctx instead of DefaultTimeout (the first call of a
// process may build the server, see EnvServerBinary; that is not bounded).
func StartServerContext(ctx context.Context, opts Options) (*Server, error) {
	if opts.Logger == nil {
		opts.Logger = zap.NewNop()
	}
	if opts.Namespace == "" {
		opts.Namespace = DefaultNamespace
	}
	if addr := strings.TrimSpace(os.Getenv(EnvAddress)); addr != "" {
		ns := strings.TrimSpace(os.Getenv(EnvNamespace))
		if ns == "" {
			ns = DefaultNamespace
		}
		s := &Server{opts: opts, external: true, hostPort: addr, namespace: ns}
		if err := s.waitReady(ctx, nil); err != nil {
			return nil, err
		}
		return s, nil
	}

	bin, err := serverBinary()
	if err != nil {
		return nil, err
	}
	// cmd/temporal-dev's -dynamic-config is YAML, in which a time.Duration is its string ("1.5s"),
	// which the server parses, not nanoseconds, which it would take for seconds.
	dynamic, err := yaml.Marshal(opts.DynamicConfig)
	if err != nil {
		return nil, fmt.Errorf("temporalx: Options.DynamicConfig: want values YAML can carry: %w", err)
	}
	s := &Server{opts: opts, namespace: opts.Namespace, dir: opts.Dir, bin: bin}
	if s.dir == "" {
		if s.dir, err = os.MkdirTemp("", "baton-temporal-"); err != nil {
			return nil, fmt.Errorf("temporalx: %w", err)
		}
	}
	// The ports are picked free and bound later by the child; if one was
	// taken in between, start again on other ports.
	for attempt := 1; ; attempt++ {
		ports, err := harness.PickPorts(4)
		if err != nil {
			s.Close()
			return nil, err
		}
		if opts.FrontendPort != 0 {
			ports[0] = opts.FrontendPort
		}
		s.hostPort = "127.0.0.1:" + strconv.Itoa(ports[0])
		s.args = []string{"-db", filepath.Join(s.dir, "temporal.db"), "-namespace", s.namespace,
			"-frontend-port", strconv.Itoa(ports[0]), "-history-port", strconv.Itoa(ports[1]),
			"-matching-port", strconv.Itoa(ports[2]), "-worker-port", strconv.Itoa(ports[3]),
			"-dynamic-config", string(dynamic), "-exit-with-stdin"}
		err = s.start(ctx)
		if err == nil {
			return s, nil
		}
		if attempt == 3 || ctx.Err() != nil || !errors.Is(err, errExited) {
			s.Close()
			return nil, err
		}
	}
}

// start runs the child and waits until it serves the namespace; on failure the child is gone.
func (s *Server) start(ctx context.Context) error {
	cmd := exec.Command(s.bin, s.args...)
	if s.opts.LogFile != "" {
		f, err := os.OpenFile(s.opts.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return fmt.Errorf("temporalx: server log: %w", err)
		}
		defer f.Close() // the child has its own descriptor
		cmd.Stdout, cmd.Stderr = f, f
	}
	// The child watches its stdin: our end closes when this process dies, however it dies.
	if _, err := cmd.StdinPipe(); err != nil {
		return fmt.Errorf("temporalx: %w", err)
	}
	return s.child.Start(cmd, func(exited <-chan struct{}) error { return s.waitReady(ctx, exited) })
}

// waitReady waits until the frontend answers and the namespace is usable, registering it on an
// external server where it does not exist yet; exited (nil for an external server) ends the wait.
func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	err := harness.Poll(ctx, 0, 100*time.Millisecond, func() error {
		select {
		case <-exited:
			return harness.Final(errExited)
		default:
			return s.tryNamespace(ctx)
		}
	})
	switch {
	case errors.Is(err, errExited) && s.opts.LogFile != "":
		b, _ := os.ReadFile(s.opts.LogFile)
		return fmt.Errorf("%w (log %s: %s)", err, s.opts.LogFile, harness.Tail(string(b), 1500))
	case err != nil && !errors.Is(err, errExited):
		return fmt.Errorf("temporalx: namespace %q on %s not ready in time: %w", s.namespace, s.hostPort, err)
	}
	return err
}

// WaitReady waits, as StartServer does for its own server, until the frontend at hostPort answers
// and namespace is usable, registering the namespace where it does not exist yet: for a server that
// another program runs, such as the Temporal CLI's dev server. A close of exited (nil: never) ends
// the wait with an error: the server's process is gone.
func WaitReady(ctx context.Context, hostPort, namespace string, exited <-chan struct{}) error {
	s := &Server{opts: Options{Logger: zap.NewNop()}, hostPort: hostPort, namespace: namespace}
	return s.waitReady(ctx, exited)
}

func (s *Server) tryNamespace(ctx context.Context) error {
	nc, err := client.NewNamespaceClient(s.clientOptions())
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	_, err = nc.Describe(rctx, s.namespace)
	var notFound *serviceerror.NamespaceNotFound
	if errors.As(err, &notFound) {
		err = nc.Register(rctx, &workflowservice.RegisterNamespaceRequest{
			Namespace:                        s.namespace,
			WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if errors.As(err, &exists) {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	// Describe and Register go straight to persistence; every service's
	// namespace registry then reads the namespace through on a cache miss,
	// except that a miss is remembered for 1s (readthroughCacheTTL) by a
	// registry that has looked the name up before. Probe until the frontend
	// (its registry) and history (its own registry) both know the namespace:
	// a describe of a workflow that does not exist then fails with NotFound,
	// not NamespaceNotFound.
	c, err := client.Dial(s.clientOptions())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.WorkflowService().DescribeWorkflowExecution(rctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: s.namespace,
		Execution: &commonpb.WorkflowExecution{WorkflowId: "temporalx-namespace-probe"},
	})
	if errors.As(err, new(*serviceerror.NotFound)) {
		return nil
	}
	return err
}

// External reports whether the server is an external one (BATON_TEMPORAL_ADDRESS).
func (s *Server) External() bool { return s.external }

// HostPort returns the frontend address, "127.0.0.1:PORT" for a server of ours.
func (s *Server) HostPort() string { return s.hostPort }

// Namespace returns the namespace NewClient uses.
func (s *Server) Namespace() string { return s.namespace }

func (s *Server) clientOptions() client.Options {
	return client.Options{
		HostPort:  s.hostPort,
		Namespace: s.namespace,
		Logger:    zapSDKLogger{s.opts.Logger.Sugar()},
	}
}

// NewClient dials an SDK client to the server and namespace, logging to
// Options.Logger (default: nowhere). The option funcs can change the
// client.Options before the dial. The caller closes the client.
//
// Dial checks the connection (GetSystemInfo): it fails at once with
// Unavailable when the server is stopped.
func (s *Server) NewClient(opts ...func(*client.Options)) (client.Client, error) {
	o := s.clientOptions()
	for _, f := range opts {
		f(&o)
	}
	return client.Dial(o)
}

// Stop stops the server gracefully (SIGTERM; the frontend port is closed
// once it returns). Clients and workers are not closed: their calls then
// fail with serviceerror.Unavailable ("connection refused") once the SDK's
// retries give up, so bound calls with a context deadline. Stopping a
// stopped server is a no-op. It returns ErrExternal for an external server.
func (s *Server) Stop() error { return s.stop(syscall.SIGTERM) }

// Kill stops the server as a crash does (SIGKILL): what it had not
// written to its database is lost. It returns ErrExternal for an external
// server.
func (s *Server) Kill() error { return s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) error {
	if s.external {
		return ErrExternal
	}
	s.child.Stop(sig, 25*time.Second)
	return nil
}

// Restart starts a stopped (or killed) server again, on the same address
// and database: it comes back with its namespaces and executions. A
// running server is stopped first. It returns once the namespace is usable,
// retrying while ctx lasts (a port taken in between by someone else may be
// freed). It returns ErrExternal for an external server.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return harness.Poll(ctx, 0, 500*time.Millisecond, func() error { return s.start(ctx) })
}

// Close stops the server (if not yet stopped) and removes its database,
// unless Options.Dir was given. Close is idempotent and does nothing for
// an external server.
func (s *Server) Close() (err error) {
	if s.external {
		return nil
	}
	s.closeOnce.Do(func() {
		if s.opts.Dir != "" {
			err = s.Stop()
			return
		}
		_ = s.Kill() // nobody reads the data again
		err = os.RemoveAll(s.dir)
	})
	return err
}

// Start is StartServer for tests: t.Fatal on error, Close on cleanup. Without opts.LogFile, the
// server's log (and, without opts.Logger, the SDK clients' log) goes to a file that is kept (in
// harness.EnvLogDir) and named in t's output when t failed.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.LogFile == "" && os.Getenv(EnvAddress) == "" {
		opts.logTo(harness.Log(t, "temporal"))
	}
	s, err := StartServer(opts)
	return harness.Serve(t, s, err)
}

// logTo makes log (if any) the server's log file and, without a Logger, the SDK clients' log.
func (o *Options) logTo(log *harness.LogFile) {
	if log == nil {
		return
	}
	o.LogFile = log.Path
	if o.Logger == nil {
		o.Logger = log.Logger
	}
}

// Client returns s.NewClient() for tests: t.Fatal on error, closed on cleanup. A failing t names the
// server's log file, if it has one.
func Client(t testing.TB, s *Server) client.Client {
	t.Helper()
	c, err := s.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, named := s.logNamed.LoadOrStore(t, true); !named && s.log != nil {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("temporal server log (kept when a test fails): %s", s.log.Path)
			}
		})
	}
	return c
}

// CancelPollsOnShutdown is the Temporal server's dynamic config key (a frontend setting, off by
// default) that makes a stopping worker's ShutdownWorker call end its outstanding polls before the
// server hands them a task; the SDK then lets its polls complete instead of cancelling them. Without
// it a task matched to a poll the worker has just cancelled waits for the workflow task timeout. Every
// dev server Baton starts sets it (tools/cmd/temporal-dev refuses a server that does not know it by
// this name).
const CancelPollsOnShutdown = "frontend.enableCancelWorkerPollsOnShutdown"

// Main is TestMain for packages whose tests share one Temporal server: it starts the server into
// *srv, runs the tests, stops the server, passes their exit code through finish (testkit's leak check,
// see testkit.TemporalMain) and exits with what finish returns.
//
// Without opts.LogFile, the server logs to a file that is kept (in harness.EnvLogDir), and named,
// when the package fails; so do the SDK clients of NewClient without opts.Logger.
func Main(m *testing.M, opts Options, srv **Server, finish func(code int) int) {
	var log *harness.LogFile
	var err error
	if opts.LogFile == "" && os.Getenv(EnvAddress) == "" {
		log, err = harness.NewLogFile("temporal")
		opts.logTo(log)
	}
	if err == nil {
		*srv, err = StartServer(opts)
	}
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		(*srv).log = log
		code = m.Run()
		_ = (*srv).Close()
		code = finish(code)
	}
	stderrf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	if err := log.Done(code != 0, stderrf); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

// zapSDKLogger adapts a zap logger to the SDK's logger interface.
type zapSDKLogger struct{ l *zap.SugaredLogger }

var _ sdklog.Logger = zapSDKLogger{}

func (z zapSDKLogger) Debug(msg string, kv ...any) { z.l.Debugw(msg, kv...) }
func (z zapSDKLogger) Info(msg string, kv ...any)  { z.l.Infow(msg, kv...) }
func (z zapSDKLogger) Warn(msg string, kv ...any)  { z.l.Warnw(msg, kv...) }
func (z zapSDKLogger) Error(msg string, kv ...any) { z.l.Errorw(msg, kv...) }

func (z zapSDKLogger) With(kv ...any) sdklog.Logger { return zapSDKLogger{z.l.With(kv...)} }

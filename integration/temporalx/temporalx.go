// Package temporalx runs a real Temporal server in-process for integration
// tests and benchmarks (go.temporal.io/server/temporaltest: all four services
// in one process, in-memory SQLite persistence and visibility, one history
// shard).
//
// When the environment variable BATON_TEMPORAL_ADDRESS is set (host:port),
// StartServer starts nothing and uses that server; the namespace is then
// taken from BATON_TEMPORAL_NAMESPACE (default "default") and Stop returns
// ErrExternal.
//
// The package is named temporalx so that it does not clash with the upstream
// package name temporaltest.
package temporalx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/server/common/dynamicconfig"
	serverlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/temporal"
	"go.temporal.io/server/temporaltest"
	"go.uber.org/zap"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/baton-run/baton/integration/testkit"
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

// Options configures StartServer.
type Options struct {
	// Namespace is registered on the server (if it does not exist yet) and
	// used by NewClient; default "default". Ignored for an external server
	// (BATON_TEMPORAL_NAMESPACE is used instead).
	Namespace string
	// Logger receives the Temporal server's logs and the logs of the SDK
	// clients made by NewClient; default zap.NewNop() (the server is very
	// chatty: hundreds of lines per start/stop).
	Logger *zap.Logger
	// DynamicConfig overrides (key -> value) for the in-process server, e.g.
	// "history.workflowIdReuseMinimalInterval": 0 (numbers are seconds for
	// duration settings; time.Duration and strings like "100ms" work too).
	// Keys are case-insensitive. Default: none (production defaults, plus
	// temporaltest's own system.forceSearchAttributesCacheRefreshOnRead=true,
	// which is kept). Values can also be []dynamicconfig.ConstrainedValue,
	// e.g. to override a setting for one namespace only.
	DynamicConfig map[string]any
}

// Server is an in-process Temporal server (or an external one, see External).
type Server struct {
	mu        sync.Mutex
	opts      Options
	external  bool
	hostPort  string
	namespace string
	ts        *temporaltest.TestServer // nil once stopped, and for an external server
	closed    bool
	log       *testkit.LogFile // where the server logs, when Start or Main chose the file
	// logOwnedByT: Start's cleanup names the log already; logNamed: the tests Client named it to.
	logOwnedByT bool
	logNamed    sync.Map
}

// StartServer starts a Temporal server in-process, its frontend on a free
// port on 127.0.0.1, and returns once the frontend serves and opts.Namespace
// is registered and usable (bounded by DefaultTimeout).
//
// If BATON_TEMPORAL_ADDRESS is set, it starts nothing; it registers the
// namespace on that server if it does not exist yet.
func StartServer(opts Options) (*Server, error) {
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
		if err := s.ensureNamespace(time.Now().Add(DefaultTimeout)); err != nil {
			return nil, err
		}
		return s, nil
	}

	s := &Server{opts: opts, namespace: opts.Namespace}
	var err error
	// The ports are picked by temporaltest as free ports and bound later;
	// if one was taken in between, start again on other ports.
	for attempt := 0; attempt < 3; attempt++ {
		// Every goroutine the server starts, directly or not, inherits
		// this label; VerifyTestMain uses it to tell them from leaks.
		pprof.Do(context.Background(), serverLabels, func(context.Context) {
			s.ts, err = newTestServer(opts)
		})
		if err == nil || !isAddrInUse(err) {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	s.hostPort = s.ts.GetFrontendHostPort()
	if err := s.ensureNamespace(time.Now().Add(DefaultTimeout)); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// newTestServer starts a temporaltest server. temporaltest.NewServer panics
// on errors when it is not given a *testing.T; the panic is returned as error.
func newTestServer(opts Options) (ts *temporaltest.TestServer, err error) {
	serverOpts := []temporal.ServerOption{
		// Later options win: this replaces temporaltest's nop logger.
		temporal.WithLogger(serverlog.NewZapLogger(opts.Logger)),
	}
	if len(opts.DynamicConfig) > 0 {
		// Replaces temporaltest's static dynamic config client, whose only
		// setting is kept here.
		dc := dynamicconfig.StaticClient{
			dynamicconfig.ForceSearchAttributesCacheRefreshOnRead.Key(): true,
		}
		for k, v := range opts.DynamicConfig {
			dc[dynamicconfig.MakeKey(k)] = v
		}
		serverOpts = append(serverOpts, temporal.WithDynamicConfigClient(dc))
	}
	defer func() {
		if r := recover(); r != nil {
			ts = nil
			if e, ok := r.(error); ok {
				err = fmt.Errorf("temporalx: start server: %w", e)
			} else {
				err = fmt.Errorf("temporalx: start server: %v", r)
			}
		}
	}()
	return temporaltest.NewServer(temporaltest.WithBaseServerOptions(serverOpts...)), nil
}

func isAddrInUse(err error) bool {
	return err != nil && strings.Contains(err.Error(), "address already in use")
}

// ensureNamespace waits until the frontend answers and registers the
// namespace if it does not exist, then waits until it is usable.
func (s *Server) ensureNamespace(deadline time.Time) error {
	var lastErr error
	for {
		if lastErr = s.tryEnsureNamespace(deadline); lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("temporalx: namespace %q on %s not ready in time: %w", s.namespace, s.hostPort, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *Server) tryEnsureNamespace(deadline time.Time) error {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	nc, err := client.NewNamespaceClient(s.clientOptions())
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	_, err = nc.Describe(rctx, s.namespace)
	var notFound *serviceerror.NamespaceNotFound
	if !errors.As(err, &notFound) {
		return err
	}
	err = nc.Register(rctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        s.namespace,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	})
	var exists *serviceerror.NamespaceAlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return err
	}
	// Describe and Register go straight to persistence; every service's
	// namespace registry then reads the namespace through on a cache miss,
	// except that a miss is remembered for 1s (readthroughCacheTTL) by a
	// registry that has looked the name up before. Probe until the frontend
	// (its registry) and history (its own registry) both know the namespace:
	// a describe of a workflow that does not exist then fails with NotFound,
	// not NamespaceNotFound.
	_, err = nc.Describe(rctx, s.namespace)
	if err != nil {
		return err
	}
	return s.probeNamespace(ctx)
}

func (s *Server) probeNamespace(ctx context.Context) error {
	c, err := client.Dial(s.clientOptions())
	if err != nil {
		return err
	}
	defer c.Close()
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.WorkflowService().DescribeWorkflowExecution(rctx, &workflowservice.DescribeWorkflowExecutionRequest{
			Namespace: s.namespace,
			Execution: &commonpb.WorkflowExecution{WorkflowId: "temporalx-namespace-probe"},
		})
		cancel()
		var notFound *serviceerror.NotFound
		if errors.As(err, &notFound) {
			return nil
		}
		if err == nil {
			return nil
		}
		var nsNotFound *serviceerror.NamespaceNotFound
		if !errors.As(err, &nsNotFound) || ctx.Err() != nil {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// External reports whether the server is an external one (BATON_TEMPORAL_ADDRESS).
func (s *Server) External() bool { return s.external }

// HostPort returns the frontend address, "127.0.0.1:PORT" for an in-process server.
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

// Stop stops the in-process server (all services; the frontend port is
// closed). Clients and workers are not closed: their calls then fail with
// serviceerror.Unavailable ("connection refused") once the SDK's retries
// give up, so bound calls with a context deadline. Stopping a stopped
// server is a no-op. It returns ErrExternal for an external server.
func (s *Server) Stop() error {
	if s.external {
		return ErrExternal
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked()
}

func (s *Server) stopLocked() (err error) {
	ts := s.ts
	if ts == nil {
		return nil
	}
	s.ts = nil
	defer func() {
		// temporaltest's Stop logs a server stop error through its
		// *testing.T, which is nil here.
		if r := recover(); r != nil {
			err = fmt.Errorf("temporalx: stop server: failed (%v)", r)
		}
	}()
	pprof.Do(context.Background(), serverLabels, func(context.Context) { ts.Stop() })
	return nil
}

// Close stops the server (if not yet stopped). The in-process server keeps
// its data in memory only (SQLite in-memory databases); there are no files
// to remove. Close is idempotent and does nothing for an external server.
func (s *Server) Close() error {
	if s.external {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.stopLocked()
}

// Start is StartServer for tests: t.Fatal on error, Close on cleanup. Without opts.Logger, the
// server's logs go to a file that is kept (in testkit.EnvLogDir) and named in t's output when t failed.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	keepLog := func() {}
	var log *testkit.LogFile
	if opts.Logger == nil && os.Getenv(EnvAddress) == "" {
		log, keepLog = testkit.ServerLog(t, "temporal")
		opts.Logger = log.Logger
	}
	s, err := StartServer(opts)
	if err != nil {
		t.Error(err)
		keepLog()
		t.FailNow()
	}
	s.log, s.logOwnedByT = log, true
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
		keepLog()
	})
	return s
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
	if _, named := s.logNamed.LoadOrStore(t, true); !named && s.log != nil && !s.logOwnedByT {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("temporal server log (kept when a test fails): %s", s.log.Path)
			}
		})
	}
	return c
}

// zapSDKLogger adapts a zap logger to the SDK's logger interface.
type zapSDKLogger struct{ l *zap.SugaredLogger }

var _ sdklog.Logger = zapSDKLogger{}

func (z zapSDKLogger) Debug(msg string, kv ...any) { z.l.Debugw(msg, kv...) }
func (z zapSDKLogger) Info(msg string, kv ...any)  { z.l.Infow(msg, kv...) }
func (z zapSDKLogger) Warn(msg string, kv ...any)  { z.l.Warnw(msg, kv...) }
func (z zapSDKLogger) Error(msg string, kv ...any) { z.l.Errorw(msg, kv...) }

func (z zapSDKLogger) With(kv ...any) sdklog.Logger { return zapSDKLogger{z.l.With(kv...)} }

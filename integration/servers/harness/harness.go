// Package harness holds what the servers, the tests and the tools of the integration module share
// to run processes and wait on them: child processes and builds, polling, free ports, log files.
package harness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"golang.org/x/sync/errgroup"
)

// Poll calls f every interval until it returns nil, and returns nil then; when timeout (if not 0)
// passes or ctx ends first, it returns an error with f's last one, and an error of Final's at once.
// Code waits on events this way, never on a guessed sleep.
func Poll(ctx context.Context, timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		var fin final
		if err == nil || errors.As(err, &fin) {
			return err
		}
		if timeout != 0 && time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(interval):
		}
	}
}

// Within runs f and waits for it at most d. On timeout f is left running: it is for stopping
// servers at shutdown, and the process exits right after.
func Within(d time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(d):
		return fmt.Errorf("not done after %v", d)
	}
}

// Parallel calls f(ctx, i) for every i in [0, n) from conc goroutines, all joined before it
// returns; the first error cancels the calls not yet made and is returned.
func Parallel(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) error {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(max(conc, 1))
	for i := 0; i < n && gctx.Err() == nil; i++ {
		g.Go(func() error {
			if gctx.Err() != nil {
				return nil // canceled while this call waited for a goroutine
			}
			return f(gctx, i)
		})
	}
	if err := g.Wait(); err != nil {
		return err
	}
	return ctx.Err()
}

// Final marks an error after which Poll waits no longer (the process it waits for has exited).
func Final(err error) error { return final{err} }

type final struct{ error }

func (f final) Unwrap() error { return f.error }

// EnvLogDir names the environment variable with the directory where server logs are written
// (default: the system's temporary directory).
const EnvLogDir = "BATON_TEST_LOG_DIR"

// LogFile is a file that a server started for tests logs into, at Info level: removed when the
// tests that used the server passed, kept (and named in their output) when one failed.
type LogFile struct {
	Path   string
	Logger *zap.Logger
	name   string
	file   *os.File
}

// NewLogFile creates the log file of the server name (e.g. "etcd") in EnvLogDir.
func NewLogFile(name string) (*LogFile, error) {
	f, err := os.CreateTemp(os.Getenv(EnvLogDir), "baton-"+name+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("testkit: server log: %w", err)
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	core := zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(f), zap.InfoLevel)
	return &LogFile{Path: f.Name(), Logger: zap.New(core), name: name, file: f}, nil
}

// Done closes the file after the server has stopped: kept, and named with logf, when failed, else
// removed. On a nil LogFile it does nothing.
func (l *LogFile) Done(failed bool, logf func(format string, args ...any)) error {
	if l == nil {
		return nil
	}
	if failed {
		logf("%s server log kept: %s", l.name, l.Path)
	}
	_ = l.Logger.Sync()
	err := l.file.Close()
	if !failed {
		err = errors.Join(err, os.Remove(l.Path))
	}
	return err
}

// Log returns a new log file for the server name that a test starts: on t's cleanup, after the
// server's (see Serve), it is kept and named in t's output when t failed, else removed.
func Log(t testing.TB, name string) *LogFile {
	t.Helper()
	log, err := NewLogFile(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := log.Done(t.Failed(), t.Logf); err != nil {
			t.Error(err)
		}
	})
	return log
}

// Serve returns the server s that a test started: t fails at once on err, and s is closed on
// cleanup.
func Serve[S interface{ Close() error }](t testing.TB, s S, err error) S {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	})
	return s
}

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{} // never hand out a port twice in this process
)

// PickPorts returns n distinct ports free on 127.0.0.1, never handed out before by this process,
// preferably below the kernel's ephemeral range so that an outgoing connection cannot take one while
// its server is down (a member or server restarting on the same port).
func PickPorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	lo, hi := 20000, ephemeralLow()
	ports := make([]int, 0, n)
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			return nil, errors.New("testkit: no free port found")
		}
		addr := "127.0.0.1:0"
		if hi-lo >= 1000 {
			addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(lo+rand.IntN(hi-lo)))
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		p := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !portsUsed[p] {
			portsUsed[p] = true
			ports = append(ports, p)
		}
	}
	return ports, nil
}

// FreeAddr returns "127.0.0.1:PORT" with a port of PickPorts.
func FreeAddr() (string, error) {
	ports, err := PickPorts(1)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), nil
}

// Socket is a listening TCP socket on 127.0.0.1 for a child process to serve on: the child inherits
// it (Pass) and listens on it without the race between choosing a free port and binding it, which a
// process of another test package choosing the same port can win (demo-worker's -http and
// -metrics-addr take the "fd:N" that Pass returns).
type Socket struct {
	// Addr is where the socket listens.
	Addr string
	file *os.File
}

// ListenSocket binds a port on 127.0.0.1.
func ListenSocket() (*Socket, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	defer l.Close() // the file is a copy that stays open
	f, err := l.(*net.TCPListener).File()
	if err != nil {
		return nil, err
	}
	return &Socket{Addr: l.Addr().String(), file: f}, nil
}

// Pass hands the socket to cmd, not started yet, and returns the child's name for it: "fd:N".
func (s *Socket) Pass(cmd *exec.Cmd) string {
	cmd.ExtraFiles = append(cmd.ExtraFiles, s.file)
	return fmt.Sprintf("fd:%d", 2+len(cmd.ExtraFiles))
}

// Close closes this process's copy of the socket: call it once the child has started (or failed
// to); the child's copy stays open.
func (s *Socket) Close() error { return s.file.Close() }

func ephemeralLow() int {
	b, _ := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	var lo int
	fmt.Sscan(string(b), &lo)
	return lo
}

// Tail returns the last n bytes of s, for quoting a server's output in an error.
func Tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// LeakGrace is how long VerifyTestMain and FindLeaks wait for goroutines to exit. After an etcd
// member stops, its peer HTTP connections can take up to rafthttp.ConnReadTimeout (5s) to drain:
// net/http aborts a pending background read by setting a past read deadline, but etcd's timeoutConn
// resets the deadline (now+5s) on every Read, so a read that starts just after the abort blocks
// until then. These goroutines do end; goleak's own retry window (well under a second) is too short
// for them. The Temporal server runs in its own process: it leaves nothing in the test's.
const LeakGrace = 10 * time.Second

// FindLeaks polls goleak.Find(opts...) until it reports no goroutine left or LeakGrace has passed:
// some goroutines end seconds after their owner has stopped.
func FindLeaks(opts ...goleak.Option) error {
	if err := Poll(context.Background(), LeakGrace, 200*time.Millisecond, func() error { return goleak.Find(opts...) }); err != nil {
		return errors.Unwrap(err)
	}
	return nil
}

// VerifyTestMain is goleak.VerifyTestMain with a grace period: it runs the tests and, if they
// passed, fails them when FindLeaks(opts...) does.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) { os.Exit(CheckLeaks(m.Run(), opts...)) }

// CheckLeaks returns the exit code of a test binary whose tests exited with code: 1 when they
// passed but FindLeaks(opts...) finds goroutines left, which it says on stderr.
func CheckLeaks(code int, opts ...goleak.Option) int {
	if code == 0 {
		if err := FindLeaks(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			return 1
		}
	}
	return code
}

// Eventually is Poll for tests, every 20 ms: it fails the test, naming what, when d passes first.
func Eventually(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	if err := Poll(context.Background(), d, 20*time.Millisecond, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

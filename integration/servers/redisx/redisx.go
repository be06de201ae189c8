// Package redisx runs a real redis-server process on a free loopback port for integration tests,
// benchmarks and the demo: one server per call, with its own working directory, stoppable, killable
// and restartable on the same port. StartCluster runs a Redis Cluster of such servers.
//
// When BATON_REDIS_ADDR is set (host:port), StartServer starts nothing and uses that server (with
// BATON_REDIS_PASSWORD, if set); Stop, Kill and Restart then return ErrExternal and tests that
// need them skip themselves.
package redisx

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/baton-run/baton/integration/servers/harness"
)

// Environment variables that point the helpers at a running server instead of starting one.
const (
	EnvAddr     = "BATON_REDIS_ADDR"
	EnvPassword = "BATON_REDIS_PASSWORD"
)

// DefaultTimeout bounds how long StartServer and Restart wait for the server to answer PING.
const DefaultTimeout = 15 * time.Second

// ErrExternal is returned by the process controls of an external server.
var ErrExternal = errors.New("redisx: server is external (" + EnvAddr + "); it cannot be stopped")

// ErrNoBinary is returned when no redis-server binary can be found.
var ErrNoBinary = errors.New("redisx: redis-server not found on PATH or in /usr/bin, /usr/local/bin, /usr/sbin " +
	"(make test installs it: apt-get install redis-server)")

// Options configures StartServer.
type Options struct {
	// Password, when set, is required of every client (requirepass).
	Password string
	// AppendOnly keeps data across Restart (appendfsync always); by default a restart starts empty,
	// as a crashed cache node would.
	AppendOnly bool
	// Args are extra redis-server arguments, e.g. "--maxmemory", "10mb", or an ACL user:
	// "--user", "baton on >pw ~baton:* +@all". Readiness probes use the default user (and Password).
	Args []string
	// TLS, when set, makes the server accept TLS connections only, on the port it is given. It needs
	// a redis-server built with TLS (Debian's is).
	TLS *TLS
	// Port is the server's port on 127.0.0.1; default a free one.
	Port int
	// LogFile is the file redis-server appends its log to; default redis.log in its working
	// directory, which Close removes (Start chooses one that outlives a failed test).
	LogFile string

	cluster bool // a Redis Cluster node (StartCluster): cluster mode, with a bus port of its own
}

// TLS configures a TLS-only server.
type TLS struct {
	// CertFile and KeyFile are the server's certificate and key (PEM).
	CertFile, KeyFile string
	// CAFile verifies client certificates (PEM). Required by redis-server even when AuthClients is off.
	CAFile string
	// AuthClients requires every client to present a certificate signed by CAFile.
	AuthClients bool
	// Client is the client side: the readiness probe, ClientOptions and NewClient use it.
	Client *tls.Config
}

// Server is one redis-server process (or an external server).
type Server struct {
	opts     Options
	external bool
	addr     string
	password string
	bin      string
	dir      string
	busPort  int // the cluster bus port of a cluster node
	proc     harness.Child
	held     []int // sockets bound to the ports while the server is stopped (holdPorts)
}

// Binary returns the path of redis-server, or ErrNoBinary.
func Binary() (string, error) { return lookPath("redis-server", ErrNoBinary) }

// CLIBinary returns the path of redis-cli (Debian's redis-tools, which redis-server depends on).
func CLIBinary() (string, error) {
	return lookPath("redis-cli", errors.New("redisx: redis-cli not found (apt-get install redis-tools)"))
}

// lookPath finds the program name on PATH or where Debian installs it.
func lookPath(name string, notFound error) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/local/bin", "/usr/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", notFound
}

// StartServer starts redis-server on a free port on 127.0.0.1 and returns once it answers PING.
func StartServer(opts Options) (*Server, error) {
	if addr := strings.TrimSpace(os.Getenv(EnvAddr)); addr != "" {
		s := &Server{opts: opts, external: true, addr: addr, password: os.Getenv(EnvPassword)}
		if err := s.waitReady(DefaultTimeout, nil); err != nil {
			return nil, fmt.Errorf("redisx: external server %s: %w", addr, err)
		}
		return s, nil
	}
	return startLocal(opts)
}

// startLocal starts a redis-server process, whatever the environment says.
func startLocal(opts Options) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "baton-redis-")
	if err != nil {
		return nil, fmt.Errorf("redisx: %w", err)
	}
	if opts.LogFile == "" {
		opts.LogFile = filepath.Join(dir, "redis.log")
	}
	s := &Server{opts: opts, bin: bin, dir: dir, password: opts.Password}
	attempts := 5 // free ports picked may be taken before the server binds them: pick others
	if opts.Port != 0 {
		attempts = 1
	}
	for attempt := 0; attempt < attempts; attempt++ {
		// A cluster node's bus port is set explicitly: the default, port+10000, may be taken or past 65535.
		ports, perr := harness.PickPorts(2)
		if perr != nil {
			err = perr
			continue
		}
		ports[0] = cmp.Or(opts.Port, ports[0])
		s.addr, s.busPort = net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0])), ports[1]
		if err = s.start(); err == nil {
			return s, nil
		}
	}
	os.RemoveAll(dir)
	return nil, err
}

func (s *Server) args() []string {
	_, port, _ := net.SplitHostPort(s.addr)
	args := []string{"--port", port}
	if t := s.opts.TLS; t != nil {
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		args = []string{"--port", "0", "--tls-port", port, "--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile,
			"--tls-ca-cert-file", t.CAFile, "--tls-auth-clients", auth}
	}
	args = append(args,
		"--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "no",
		"--logfile", s.opts.LogFile, "--loglevel", "warning",
	)
	if s.opts.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if s.opts.Password != "" {
		args = append(args, "--requirepass", s.opts.Password)
	}
	if s.opts.cluster {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(s.busPort))
	}
	return append(args, s.opts.Args...)
}

// start launches the process on s.addr and waits until it answers.
func (s *Server) start() error {
	cmd := exec.Command(s.bin, s.args()...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	s.releasePorts()
	err := s.proc.Start(cmd, func(exited <-chan struct{}) error { return s.waitReady(DefaultTimeout, exited) })
	if err != nil {
		log, _ := os.ReadFile(s.opts.LogFile)
		return fmt.Errorf("redisx: redis-server on %s did not become ready: %w\n%s", s.addr, err, harness.Tail(string(log), 2000))
	}
	return nil
}

// waitReady waits until the server answers PING; exited (nil for an external server) ends the wait.
func (s *Server) waitReady(timeout time.Duration, exited <-chan struct{}) error {
	c := redis.NewClient(&redis.Options{Addr: s.addr, Password: s.password, MaxRetries: -1,
		DialTimeout: time.Second, ReadTimeout: time.Second, TLSConfig: s.clientTLS()})
	defer c.Close()
	return harness.Poll(context.Background(), timeout, 20*time.Millisecond, func() error {
		select {
		case <-exited:
			return harness.Final(errors.New("process exited"))
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if s.external {
			return c.Ping(ctx).Err()
		}
		// The server that answers must be the one just started: after a restart, another process's
		// server may have bound the port while ours was down, and would answer PING as well.
		info, err := c.Info(ctx, "server").Result()
		if err != nil {
			return err
		}
		if pid, want := infoField(info, "process_id"), strconv.Itoa(s.proc.Pid()); pid != want {
			return fmt.Errorf("the server on %s is process %s, not the one started (%s)", s.addr, pid, want)
		}
		return nil
	})
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// External reports whether the server was started elsewhere (BATON_REDIS_ADDR).
func (s *Server) External() bool { return s.external }

// Addr returns host:port.
func (s *Server) Addr() string { return s.addr }

// Password returns the password clients need, if any.
func (s *Server) Password() string { return s.password }

// Options returns client options for the server; Protocol 2 keeps pipelines byte-for-byte simple.
func (s *Server) ClientOptions() *redis.Options {
	return &redis.Options{Addr: s.addr, Password: s.password, Protocol: 2, DisableIdentity: true, TLSConfig: s.clientTLS()}
}

func (s *Server) clientTLS() *tls.Config {
	if s.opts.TLS == nil {
		return nil
	}
	return s.opts.TLS.Client
}

// NewClient returns a go-redis client for the server.
func (s *Server) NewClient() *redis.Client { return redis.NewClient(s.ClientOptions()) }

// Stop shuts the server down with SIGTERM and waits for it to exit (SIGKILL after 5 s).
func (s *Server) Stop() error { return s.signalStop(syscall.SIGTERM) }

// Kill ends the server with SIGKILL, as a crash would, and waits for it.
func (s *Server) Kill() error { return s.signalStop(syscall.SIGKILL) }

func (s *Server) signalStop(sig syscall.Signal) error {
	if s.external {
		return ErrExternal
	}
	s.proc.Stop(sig, 5*time.Second)
	s.holdPorts()
	return nil
}

// holdPorts binds the stopped server's ports until it starts again, so that no other process
// (another test package's server picking a free port) can take them while it is down. The sockets
// are bound, not listening: a client still gets "connection refused", as from a server that is down.
func (s *Server) holdPorts() {
	s.releasePorts()
	ports := []string{s.addr}
	if s.opts.cluster {
		ports = append(ports, net.JoinHostPort("127.0.0.1", strconv.Itoa(s.busPort)))
	}
	for _, a := range ports {
		if fd, err := bindOnly(a); err == nil { // taken already: Restart waits for it
			s.held = append(s.held, fd)
		}
	}
}

func (s *Server) releasePorts() {
	for _, fd := range s.held {
		syscall.Close(fd)
	}
	s.held = nil
}

// bindOnly binds a TCP socket to addr (127.0.0.1:port) without listening on it, and without
// SO_REUSEADDR, so that any other bind of the port fails while it is held.
func bindOnly(addr string) (int, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return -1, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return -1, err
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// Restart starts the server again on the same port (stopping it first if it runs).
func (s *Server) Restart() error {
	if err := s.Stop(); err != nil {
		return err
	}
	// The port was held since the stop and is let go just before redis-server binds it; should
	// anything take it in between, the start fails (redis-server cannot bind, or the server that
	// answers is not ours) and is tried again for a while rather than moved.
	return harness.Poll(context.Background(), DefaultTimeout, 100*time.Millisecond, s.start)
}

// Close stops the server and removes its working directory.
func (s *Server) Close() error {
	if s.external {
		return nil
	}
	err := s.Kill()
	s.releasePorts()
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = rerr
	}
	return err
}

// Start is StartServer for tests: t.Fatal on error, Close on cleanup. Without opts.LogFile, the
// server's log is kept (in harness.EnvLogDir) and named in t's output when t failed.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	if opts.LogFile == "" && os.Getenv(EnvAddr) == "" {
		opts.LogFile = harness.Log(t, "redis").Path
	}
	s, err := StartServer(opts)
	return harness.Serve(t, s, err)
}

// Client returns s.NewClient() for tests, closed on cleanup. On an external server the test's keys
// are not isolated: tests use key prefixes of their own (see Prefix).
func Client(t testing.TB, s *Server) *redis.Client {
	t.Helper()
	c := s.NewClient()
	t.Cleanup(func() { c.Close() })
	return c
}

// Prefix returns a key prefix unique to the test, so that tests sharing an external server do not
// see each other's keys.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("t%x:%s:", rand.Uint32(), strings.ReplaceAll(t.Name(), "/", "."))
}

// SkipExternal skips a test that must stop, kill or restart the server.
func SkipExternal(t testing.TB, s *Server) {
	t.Helper()
	if s.External() {
		t.Skip("the Redis server is external (" + EnvAddr + "): this test needs to control the process")
	}
}

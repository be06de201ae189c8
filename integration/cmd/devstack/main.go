// Command devstack starts, on loopback, the real servers a Baton demo or a developer needs: an
// embedded etcd cluster, an in-process Temporal server and a Redis server. It prints their endpoints
// as shell-sourceable lines (and writes them to -env-file once everything is ready), keeps the
// servers up until SIGINT or SIGTERM, then stops them in reverse order and removes their data.
//
//	go run ./cmd/devstack -env-file /tmp/baton.env &
//	while [ ! -f /tmp/baton.env ]; do sleep 0.2; done
//	set -a; . /tmp/baton.env; set +a   # etcdtest, temporalx and redistest now use these servers
//
// Redis is the real redis-server when it is installed (or can be installed with apt-get, as root or
// with passwordless sudo). Otherwise, in -redis=auto mode, an in-process Redis-compatible server
// (miniredis) stands in; BATON_DEVSTACK_REDIS=inprocess says so. It runs Baton's scripts, but it is
// not Redis: fault drills against Redis (kill, pause, restart) need the real server.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/redistest"
	"github.com/baton-run/baton/integration/temporalx"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run() error {
	o, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	o.stdout, o.stderr = os.Stdout, os.Stderr

	// The helpers use an already running server when these are set (e.g. by sourcing an env file
	// of an earlier devstack); devstack always starts its own.
	for _, name := range []string{etcdtest.EnvEndpoints, temporalx.EnvAddress, temporalx.EnvNamespace,
		redistest.EnvAddr, redistest.EnvPassword} {
		if v, ok := os.LookupEnv(name); ok {
			if v != "" {
				fmt.Fprintf(os.Stderr, "devstack: ignoring %s=%s from the environment: devstack starts its own servers\n", name, v)
			}
			os.Unsetenv(name)
		}
	}

	// Every temp dir of the servers (etcd's data dirs, redis-server's working dir) goes under
	// scratch, so that even an exit on a second signal leaves no files behind.
	scratch, err := os.MkdirTemp("", "baton-devstack-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	os.Setenv("TMPDIR", scratch)
	o.tmpDir = scratch
	cleanup := func() {
		if o.envFile != "" {
			os.Remove(o.envFile) // it must not point at dead servers
		}
		os.RemoveAll(scratch)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		exitOnSecondSignal(ctx, stop, done, cleanup)
	}()
	defer func() {
		close(done)
		wg.Wait()
	}()

	st, err := start(ctx, o)
	if err != nil {
		return err
	}
	<-ctx.Done()
	o.say("stopping (a second signal exits at once)")
	began := time.Now()
	if err := st.Close(); err != nil {
		return err
	}
	o.say("stopped in %v", time.Since(began).Round(time.Millisecond))
	return nil
}

// exitOnSecondSignal waits for the first signal (ctx done), then hands the signals over from
// NotifyContext to its own channel, so that a second SIGINT/SIGTERM during startup or shutdown
// ends the process at once, after cleanup (redis-server dies with us: Pdeathsig). It returns
// when done is closed.
func exitOnSecondSignal(ctx context.Context, stop context.CancelFunc, done <-chan struct{}, cleanup func()) {
	select {
	case <-ctx.Done():
	case <-done:
		return
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM) // before stop(): no window with the default action
	defer signal.Stop(sigs)
	stop()
	select {
	case sig := <-sigs:
		fmt.Fprintf(os.Stderr, "devstack: %v again: exiting now without a clean shutdown\n", sig)
		cleanup()
		code := 1
		if s, ok := sig.(syscall.Signal); ok {
			code = 128 + int(s)
		}
		os.Exit(code)
	case <-done:
	}
}

// options are the command's flags.
type options struct {
	etcdMembers  int
	redis        string // redisAuto, redisReal or redisInprocess
	installRedis bool
	envFile      string
	quiet        bool

	// Not flags.
	stdout, stderr io.Writer
	// closeTimeout bounds the stop of each server; default 15 s.
	closeTimeout time.Duration
	// installTimeout bounds apt-get install; default 3 min.
	installTimeout time.Duration
	// tmpDir is where the data dir is created; default os.TempDir().
	tmpDir string
	// redisBinary finds redis-server; default redistest.Binary.
	redisBinary func() (string, error)
}

const (
	redisAuto      = "auto"
	redisReal      = "real"
	redisInprocess = "inprocess"
)

func parseFlags(args []string, output io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.IntVar(&o.etcdMembers, "etcd-members", 1, "number of embedded etcd members")
	fs.StringVar(&o.redis, "redis", redisAuto, "Redis server: real (redis-server), inprocess (miniredis stand-in), "+
		"or auto (real if redis-server is installed or can be installed, else inprocess)")
	fs.BoolVar(&o.installRedis, "install-redis", true, "when redis-server is missing, apt-get install it "+
		"(only as root or with passwordless sudo)")
	fs.StringVar(&o.envFile, "env-file", "", "write the endpoints as shell-sourceable BATON_* lines to this file "+
		"once every server is ready (atomically; removed on exit)")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the BATON_* lines (and warnings)")
	fs.Usage = func() {
		fmt.Fprintf(output, "Usage: devstack [flags]\n\nStarts etcd, Temporal and Redis on loopback until SIGINT/SIGTERM.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.validate()
}

func (o options) validate() error {
	if o.etcdMembers < 1 || o.etcdMembers > 9 {
		return fmt.Errorf("-etcd-members=%d: want 1 to 9", o.etcdMembers)
	}
	switch o.redis {
	case redisAuto, redisReal, redisInprocess:
	default:
		return fmt.Errorf("-redis=%q: want %s, %s or %s", o.redis, redisAuto, redisReal, redisInprocess)
	}
	return nil
}

func (o options) withDefaults() options {
	if o.stdout == nil {
		o.stdout = io.Discard
	}
	if o.stderr == nil {
		o.stderr = io.Discard
	}
	if o.closeTimeout <= 0 {
		o.closeTimeout = 15 * time.Second
	}
	if o.installTimeout <= 0 {
		o.installTimeout = 3 * time.Minute
	}
	if o.redisBinary == nil {
		o.redisBinary = redistest.Binary
	}
	return o
}

// say prints a human line, as a shell comment so that stdout stays sourceable.
func (o options) say(format string, args ...any) {
	if !o.quiet {
		fmt.Fprintf(o.stdout, "# "+format+"\n", args...)
	}
}

// warn prints to stderr whatever -quiet says.
func (o options) warn(format string, args ...any) {
	fmt.Fprintf(o.stderr, "devstack: "+format+"\n", args...)
}

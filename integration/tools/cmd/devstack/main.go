// Command devstack starts, on loopback, the real servers a Baton demo or a developer needs: an
// embedded etcd cluster, a Temporal server (a child process that ends with devstack, so this binary
// does not link the server) and a Redis server. It prints their endpoints as shell-sourceable lines
// (and writes them to -env-file once everything is ready), keeps the servers up until SIGINT or
// SIGTERM, then stops them in reverse order and removes their data.
//
// Start it with `make devstack` (DEVSTACK_FLAGS passes flags), from the repository's root: it says
// what it builds before it builds it (devstack, and Baton's own Temporal server when there is no
// Temporal CLI) into .demo/bin, then runs it. `go run ./tools/cmd/devstack` in integration/ works too,
// but prints nothing until it is compiled: on a machine's first use, minutes of `go: downloading`.
//
//	make devstack DEVSTACK_FLAGS='-env-file /tmp/baton.env' &
//	while [ ! -f /tmp/baton.env ]; do sleep 0.2; done
//	set -a; . /tmp/baton.env; set +a   # etcdx, temporalx and redisx now use these servers
//
// The servers are package stack's: Redis is the real redis-server when it is installed (`make deps`
// installs it); otherwise, in -redis=auto mode, an in-process stand-in, and BATON_DEVSTACK_REDIS=inprocess
// says so.
//
// The Temporal server is the Temporal CLI's dev server (`temporal server start-dev`, with its Web
// UI) when the CLI is installed, which starts in seconds; otherwise Baton's own (cmd/temporal-dev,
// which `make devstack` builds first, or devstack on its first start, saying what it builds: minutes).
// -temporal chooses, and BATON_DEVSTACK_TEMPORAL says which runs.
//
// While devstack runs, `devstack restart temporal [-down DURATION]` from another shell (or SIGUSR1,
// without -down) restarts only the Temporal server, to rehearse its most common incident: it stops
// the server, keeps it down for DURATION, starts it again on the same port and database (its
// executions survive) and returns once it serves again; etcd and Redis stay up. The command finds
// the running devstack through a unix socket in devstack's scratch dir, named by
// BATON_DEVSTACK_CONTROL in the env file (sourcing it points the command at that devstack); without
// it, the one devstack whose socket answers under $TMPDIR.
//
//	.demo/bin/devstack restart temporal -down 3s   # Temporal down for 3 s, then back with its executions
//
// Ports are picked free unless given: -fixed-ports uses the servers' well-known ones (etcd 2379,
// Temporal 7233 and its Web UI 8233, Redis 6379), and -etcd-port, -temporal-port, -temporal-ui-port
// and -redis-port choose each.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/stack"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "devstack:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) > 1 && os.Args[1] == "restart" {
		return restart(os.Args[2:])
	}
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
	for _, name := range []string{etcdx.EnvEndpoints, temporalx.EnvAddress, temporalx.EnvNamespace,
		redisx.EnvAddr, redisx.EnvPassword} {
		if v := os.Getenv(name); v != "" {
			fmt.Fprintf(os.Stderr, "devstack: ignoring %s=%s from the environment: devstack starts its own servers\n", name, v)
		}
		os.Unsetenv(name)
	}

	// Every temp dir of the servers (etcd's data dirs, redis-server's working dir) goes under
	// scratch, so that even an exit on a second signal leaves no files behind.
	scratch, err := os.MkdirTemp("", scratchPrefix)
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	os.Setenv("TMPDIR", scratch)
	o.servers.Dir = scratch

	// The first SIGINT/SIGTERM stops the servers cleanly; a second one, during startup or shutdown,
	// ends the process at once, after removing the files (redis-server dies with us: Pdeathsig).
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	// SIGUSR1 restarts the Temporal server (not SIGHUP: a closed terminal must still stop devstack).
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-sigs
		cancel()
		sig := <-sigs
		fmt.Fprintf(os.Stderr, "devstack: %v again: exiting now without a clean shutdown\n", sig)
		if o.envFile != "" {
			os.Remove(o.envFile) // it must not point at dead servers
		}
		os.RemoveAll(scratch)
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()

	st, err := start(ctx, o)
	if err != nil {
		return err
	}
	return st.serve(ctx, usr1)
}

// restart is `devstack restart temporal [-down D]`: it asks the running devstack to restart its
// Temporal server and prints the restart's progress until the server serves again.
func restart(args []string) error {
	down, err := parseRestart(args, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	socket, err := findControl()
	if err != nil {
		return err
	}
	return requestRestart(socket, down, os.Stdout, nil)
}

// serve keeps the stack up, restarting its Temporal server on each request (SIGUSR1 or `devstack
// restart temporal`), until ctx ends or the Temporal CLI's dev server exits on its own; then it
// stops the stack.
func (d *devstack) serve(ctx context.Context, usr1 <-chan os.Signal) error {
	for {
		select {
		case <-ctx.Done():
			fmt.Fprintln(d.stderr, "devstack: stopping (a second signal exits at once)")
			return d.Close()
		case <-d.temporalExited():
			err := fmt.Errorf("the Temporal CLI's dev server exited on its own; its output:\n%s", d.Temporal.(*cliServer).output())
			fmt.Fprintln(d.stderr, "devstack: the Temporal server exited: stopping the other servers")
			return errors.Join(err, d.Close())
		case <-usr1:
			if err := d.restartTemporal(ctx, 0, d.say, nil); err != nil {
				fmt.Fprintf(d.stderr, "devstack: SIGUSR1: %v\n", err)
			}
		case req := <-d.requests():
			say := func(format string, a ...any) { d.say(format, a...); req.say(format, a...) }
			req.done <- d.restartTemporal(ctx, req.down, say, req.isDown)
		}
	}
}

// options are the command's flags (in servers: -etcd-members and -redis), and where it writes.
type options struct {
	servers        stack.Options
	temporal       temporalOptions
	fixedPorts     bool
	given          map[string]bool // the flags given
	envFile        string
	quiet          bool
	stdout, stderr io.Writer
}

func parseFlags(args []string, output io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("devstack", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.IntVar(&o.servers.EtcdMembers, "etcd-members", 1, "number of embedded etcd members")
	fs.StringVar(&o.servers.Redis, "redis", stack.RedisAuto, "Redis server: real (redis-server), inprocess (miniredis stand-in), "+
		"or auto (real if redis-server is installed, else inprocess)")
	fs.StringVar(&o.temporal.mode, "temporal", temporalAuto, "Temporal server: cli (the Temporal CLI's dev server, "+
		"`temporal server start-dev`: starts in seconds, has the Web UI), builtin (Baton's own, cmd/temporal-dev: "+
		"built on the first start, minutes), or auto (cli if the Temporal CLI is found, else builtin)")
	fs.StringVar(&o.temporal.cli, "temporal-cli", "", "path of the Temporal CLI (default: temporal on PATH); implies -temporal=cli")
	fs.IntVar(&o.temporal.port, "temporal-port", 0, "Temporal frontend port on 127.0.0.1, the BATON_TEMPORAL_ADDRESS "+
		"clients dial (default: a free one; 7233 is where Temporal's tools look by default)")
	fs.IntVar(&o.temporal.uiPort, "temporal-ui-port", 0, "port of the Temporal Web UI, which only the Temporal CLI "+
		"has (default: a free one; 8233 is the CLI's own default); implies -temporal=cli")
	fs.IntVar(&o.servers.EtcdPort, "etcd-port", 0, "etcd client port on 127.0.0.1, the BATON_ETCD_ENDPOINTS "+
		"clients dial; more members listen on the next ports (default: free ones)")
	fs.IntVar(&o.servers.RedisPort, "redis-port", 0, "Redis port on 127.0.0.1, the BATON_REDIS_ADDR clients dial (default: a free one)")
	fs.BoolVar(&o.fixedPorts, "fixed-ports", false, fmt.Sprintf("the servers' well-known ports, where their tools "+
		"look by default: etcd %d (more members: the next ports), Temporal %d (the CLI's Web UI: %d), Redis %d; "+
		"a -*-port flag given overrides its server's", wellKnownEtcd, wellKnownTemporal, wellKnownTemporalUI, wellKnownRedis))
	fs.StringVar(&o.envFile, "env-file", "", "write the endpoints as shell-sourceable BATON_* lines to this file "+
		"once every server is ready (atomically; removed on exit)")
	fs.BoolVar(&o.quiet, "quiet", false, "print only the BATON_* lines (and warnings)")
	fs.Usage = func() {
		fmt.Fprintf(output, "Usage: devstack [flags]\n       devstack restart temporal [-down DURATION]\n\n"+
			"Starts etcd, Temporal and Redis on loopback until SIGINT/SIGTERM; while it runs, `devstack restart temporal`\n"+
			"(or SIGUSR1) restarts only Temporal, on the same port and database.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if n := o.servers.EtcdMembers; n < 1 || n > 9 {
		return o, fmt.Errorf("-etcd-members=%d: want 1 to 9", n)
	}
	if r := o.servers.Redis; !slices.Contains([]string{stack.RedisAuto, stack.RedisReal, stack.RedisInprocess}, r) {
		return o, fmt.Errorf("-redis=%q: want %s, %s or %s", r, stack.RedisAuto, stack.RedisReal, stack.RedisInprocess)
	}
	if err := o.checkTemporal(); err != nil {
		return o, err
	}
	o.given = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	if o.fixedPorts {
		o.wellKnownPorts()
	}
	return o, checkPorts(o.ports(o.temporal))
}

// checkTemporal checks the Temporal flags against each other.
func (o options) checkTemporal() error {
	t := o.temporal
	if !slices.Contains([]string{temporalAuto, temporalCLI, temporalBuiltin}, t.mode) {
		return fmt.Errorf("-temporal=%q: want %s, %s or %s", t.mode, temporalAuto, temporalCLI, temporalBuiltin)
	}
	if t.mode == temporalBuiltin && t.cli != "" {
		return fmt.Errorf("-temporal-cli=%s asks for the Temporal CLI, -temporal=builtin for Baton's own server: give one", t.cli)
	}
	if t.mode == temporalBuiltin && t.uiPort != 0 {
		return fmt.Errorf("-temporal-ui-port=%d: Baton's own Temporal server (-temporal=builtin) has no Web UI; the Temporal CLI's has", t.uiPort)
	}
	return nil
}

// devstack is the running stack, which Temporal server it runs, its control socket and env file.
type devstack struct {
	*stack.Stack
	temporal string   // temporalCLI or temporalBuiltin
	control  *control // nil when the socket could not be made
	envFile  string
	say      func(format string, a ...any) // devstack's human lines
	stderr   io.Writer
	restarts atomic.Int64 // restarts of the Temporal server that ended with it serving again
}

// start starts the stack, prints its endpoints and writes the env file. On failure, or when ctx ends
// before all are up, it stops what it started.
func start(ctx context.Context, o options) (*devstack, error) {
	if o.stdout == nil {
		o.stdout = io.Discard
	}
	if o.stderr == nil {
		o.stderr = io.Discard
	}
	o.servers.Say = func(format string, args ...any) {
		if !o.quiet {
			fmt.Fprintf(o.stdout, "# "+format+"\n", args...) // a shell comment: stdout stays sourceable
		}
	}
	o.servers.Warn = func(format string, args ...any) { fmt.Fprintf(o.stderr, "devstack: "+format+"\n", args...) }
	began := time.Now()
	if o.envFile != "" {
		// A script waits for the file to appear: one left over by an earlier run must not count.
		if err := os.Remove(o.envFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("env file: %w", err)
		}
	}
	plan, err := resolveTemporal(ctx, o.temporal, o.servers.Say, o.servers.Warn)
	if err != nil {
		return nil, err
	}
	if plan.mode == temporalCLI && plan.wellKnownUI {
		plan.uiPort = wellKnownTemporalUI
	}
	if err := checkPortsFree(o.ports(plan.temporalOptions)); err != nil {
		return nil, err
	}
	o.servers.Temporal, o.servers.TemporalStarting = plan.starter()
	st, err := stack.Start(ctx, o.servers)
	if err != nil {
		return nil, err
	}
	d, where := &devstack{Stack: st, temporal: plan.mode, say: o.servers.Say, stderr: o.stderr}, ""
	if c, ok := st.Temporal.(*cliServer); ok {
		o.servers.Say("temporal  Web UI at %s", c.uiURL)
	}
	d.listenControl(o.servers.Dir, o.servers.Warn)
	if o.envFile != "" {
		if err := writeEnvFile(o.envFile, d.Env()); err != nil {
			return nil, errors.Join(fmt.Errorf("env file: %w", err), d.Close())
		}
		d.envFile, where = o.envFile, "; wrote "+o.envFile
	}
	fmt.Fprint(o.stdout, formatEnv(d.Env()))
	o.servers.Say("ready in %v%s; SIGINT (Ctrl-C) or SIGTERM stops everything", since(began), where)
	restart := fmt.Sprintf("kill -USR1 %d", os.Getpid())
	if d.control != nil {
		restart = "devstack restart temporal [-down 3s], or " + restart + ","
	}
	o.servers.Say("%s restarts only Temporal, on the same port and database", restart)
	return d, nil
}

// listenControl makes the control socket in dir; without it (a dir too long for a socket's path)
// devstack runs on, and SIGUSR1 still restarts Temporal.
func (d *devstack) listenControl(dir string, warn func(format string, a ...any)) {
	path := filepath.Join(cmp.Or(dir, os.TempDir()), controlSocket)
	c, err := listenControl(path)
	if err != nil {
		warn("NOTICE: no control socket (%v): `devstack restart temporal` cannot find this devstack; "+
			"kill -USR1 %d restarts its Temporal server", err, os.Getpid())
		return
	}
	d.control = c
}

// requests are the restart requests of the control socket; nil (none) without one.
func (d *devstack) requests() <-chan restartRequest {
	if d.control == nil {
		return nil
	}
	return d.control.requests
}

// Env returns the stack's BATON_* variables and devstack's own: BATON_DEVSTACK_TEMPORAL says which
// Temporal server runs (cli or builtin), BATON_DEVSTACK_TEMPORAL_UI where its Web UI is (the CLI's),
// BATON_DEVSTACK_CONTROL (envControl) where `devstack restart temporal` finds this devstack.
func (d *devstack) Env() []stack.EnvVar {
	env := append(d.Stack.Env(), stack.EnvVar{Name: "BATON_DEVSTACK_TEMPORAL", Value: d.temporal})
	if c, ok := d.Temporal.(*cliServer); ok {
		env = append(env, stack.EnvVar{Name: "BATON_DEVSTACK_TEMPORAL_UI", Value: c.uiURL})
	}
	if d.control != nil {
		env = append(env, stack.EnvVar{Name: envControl, Value: d.control.path})
	}
	return env
}

// temporalExited is closed when the Temporal CLI's dev server exits; nil (never) for Baton's own,
// whose process temporalx owns.
func (d *devstack) temporalExited() <-chan struct{} {
	if c, ok := d.Temporal.(*cliServer); ok {
		return c.exited
	}
	return nil
}

// Close stops the control socket, removes the env file (it must not point at stopped servers), then
// stops the servers.
func (d *devstack) Close() error {
	var err error
	if d.control != nil {
		err = d.control.Close()
		d.control = nil
	}
	if d.envFile != "" {
		if rerr := os.Remove(d.envFile); !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
		d.envFile = ""
	}
	return errors.Join(err, d.Stack.Close())
}

// formatEnv renders the variables as NAME=value lines that sh can source and docker's
// --env-file reads alike (values are quoted only when they must be).
func formatEnv(vars []stack.EnvVar) string {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "%s=%s\n", v.Name, shellQuote(v.Value))
	}
	return b.String()
}

func shellQuote(v string) string {
	unsafe := func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.,:/@%+=", r))
	}
	if v != "" && !strings.ContainsFunc(v, unsafe) {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// writeEnvFile writes the file atomically (a temp file in the same dir, renamed), so that a reader
// that sees the file sees all of it.
func writeEnvFile(path string, vars []stack.EnvVar) error {
	tmp := fmt.Sprintf("%s.tmp-%d", path, os.Getpid())
	if err := os.WriteFile(tmp, []byte(formatEnv(vars)), 0o644); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

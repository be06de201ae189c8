package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/stack"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

// The Temporal servers of -temporal.
const (
	temporalAuto    = "auto"    // the Temporal CLI when there is one, else builtin
	temporalCLI     = "cli"     // `temporal server start-dev`, or an error
	temporalBuiltin = "builtin" // Baton's own cmd/temporal-dev, through temporalx
)

// cliName is the Temporal CLI's executable, looked up on PATH when -temporal-cli is not given.
const cliName = "temporal"

// temporalOptions are the flags that choose and place the Temporal server.
type temporalOptions struct {
	mode   string // temporalAuto, temporalCLI or temporalBuiltin
	cli    string // -temporal-cli: the CLI's path; "" looks cliName up on PATH
	port   int    // the frontend's port; 0 picks a free one
	uiPort int    // the CLI's Web UI port; 0 picks a free one, or the well-known one:
	// wellKnownUI is set by -fixed-ports without -temporal-ui-port: the CLI's Web UI on 8233.
	wellKnownUI bool
}

// temporalPlan is the Temporal server devstack runs: mode is temporalCLI or temporalBuiltin.
type temporalPlan struct {
	temporalOptions
	version string // the CLI's --version line
}

// resolveTemporal finds the server o asks for: in auto mode the Temporal CLI when one is found (and
// says it is the Temporal CLI), else Baton's own; -temporal-cli and -temporal-ui-port ask for the
// CLI. say and warn tell people which, and why.
func resolveTemporal(ctx context.Context, o temporalOptions, say, warn func(format string, args ...any)) (temporalPlan, error) {
	p := temporalPlan{temporalOptions: o}
	if o.mode == temporalBuiltin {
		say("temporal  using Baton's own Temporal server (-temporal=builtin)")
		return p, nil
	}
	name, flag := cliName, ""
	switch {
	case o.cli != "":
		name, flag = o.cli, "-temporal-cli="+o.cli
	case o.uiPort != 0:
		flag = fmt.Sprintf("-temporal-ui-port=%d (only the Temporal CLI has a Web UI)", o.uiPort)
	case o.mode == temporalCLI:
		flag = "-temporal=cli"
	}
	path, err := exec.LookPath(name)
	if err == nil {
		p.version, err = cliVersion(ctx, path)
	}
	switch {
	case err == nil:
		p.mode, p.cli = temporalCLI, path
		say("temporal  using the Temporal CLI's dev server: %s (%s); nothing to build", path, p.version)
		return p, nil
	case flag != "":
		return p, fmt.Errorf("%s: no usable Temporal CLI: %w (install it, name it with -temporal-cli, or use -temporal=builtin)", flag, err)
	case errors.Is(err, exec.ErrNotFound):
		say("temporal  no Temporal CLI (%s) on PATH: using Baton's own Temporal server", cliName)
	default:
		warn("NOTICE: using Baton's own Temporal server: %s on PATH is not a usable Temporal CLI: %v", path, err)
	}
	p.mode = temporalBuiltin
	return p, nil
}

// cliVersion runs `path --version` and returns its line, which must be the Temporal CLI's
// ("temporal version 1.5.1 (Server 1.29.1, UI 2.41.0)").
func cliVersion(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w: %s", path, err, harness.Tail(strings.TrimSpace(string(out)), 200))
	}
	// The line may come with others (the CLI's notice of a newer release).
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); strings.HasPrefix(line, cliName+" version ") {
			return line, nil
		}
	}
	return "", fmt.Errorf("%s --version said %q, not %q", path, harness.Tail(strings.TrimSpace(string(out)), 200), cliName+" version ...")
}

// starter returns the stack's Temporal start for the plan, and what to say as it starts ("" for the
// stack's default, which is about Baton's own server).
func (p temporalPlan) starter() (func(ctx context.Context, dir string) (stack.Temporal, error), string) {
	if p.mode == temporalCLI {
		return func(ctx context.Context, dir string) (stack.Temporal, error) { return startCLI(ctx, p, dir) }, "starting the Temporal CLI's dev server"
	}
	return func(ctx context.Context, dir string) (stack.Temporal, error) {
		if bin := os.Getenv(temporalx.EnvServerBinary); bin != "" {
			if _, err := os.Stat(bin); err != nil {
				return nil, fmt.Errorf("%s=%s: %w (make devstack builds it there; without %s devstack builds it)",
					temporalx.EnvServerBinary, bin, err, temporalx.EnvServerBinary)
			}
		}
		s, err := temporalx.StartServerContext(ctx, temporalx.Options{Dir: dir, FrontendPort: p.port})
		if err != nil {
			return nil, err
		}
		return s, nil
	}, builtinStarting(os.Getenv(temporalx.EnvServerBinary))
}

// builtinStarting says what starting Baton's own Temporal server takes: with bin (temporalx's
// EnvServerBinary, which `make devstack` sets) nothing to build; without it a go build, which on a
// machine's first start downloads and compiles the Temporal server's modules.
func builtinStarting(bin string) string {
	if bin != "" {
		return fmt.Sprintf("starting Baton's own Temporal server, %s (%s); nothing to build", bin, temporalx.EnvServerBinary)
	}
	return "building Baton's own Temporal server (go build ./tools/cmd/temporal-dev into the user cache dir) before " +
		"it starts: the first build on a machine downloads and compiles the Temporal server's modules (go.temporal.io/server " +
		"and its dependencies), several minutes; later starts only check it is up to date, seconds. `make devstack` " +
		"builds it first; the Temporal CLI, when installed, needs no build"
}

// cliServer is the Temporal CLI's dev server, devstack's child process.
type cliServer struct {
	hostPort, uiURL string
	log             string   // the server's output, of every start
	path            string   // the CLI
	args            []string // the same for every start: a restart is the same server on the same database
	child           harness.Child
	exited          <-chan struct{} // closed when the process exits; nil while it is stopped
}

// cliServer restarts as temporalx's server does.
var _ restartable = (*cliServer)(nil)

func (s *cliServer) HostPort() string  { return s.hostPort }
func (s *cliServer) Namespace() string { return temporalx.DefaultNamespace }

// output returns the end of the server's output.
func (s *cliServer) output() string {
	b, err := os.ReadFile(s.log)
	if err != nil {
		return err.Error()
	}
	return harness.Tail(string(b), 2000)
}

// Stop stops the server (SIGTERM, then SIGKILL after 10 s) and waits for its process; its database
// stays, for Restart.
func (s *cliServer) Stop() error {
	s.child.Stop(syscall.SIGTERM, 10*time.Second)
	s.exited = nil // stopped, not exited on its own
	return nil
}

// Restart stops the server if it runs, then starts it again on the same ports and database file: it
// comes back with its namespaces and executions.
func (s *cliServer) Restart(ctx context.Context) error {
	s.Stop()
	return s.start(ctx)
}

// Close stops the server; its data is in the stack's data dir, which the stack removes.
func (s *cliServer) Close() error { return s.Stop() }

// startCLI runs `temporal server start-dev` on 127.0.0.1, its database and output in dir, and
// returns once the frontend serves the default namespace (bounded by temporalx.DefaultTimeout).
func startCLI(ctx context.Context, p temporalPlan, dir string) (*cliServer, error) {
	ports, err := harness.PickPorts(2)
	if err != nil {
		return nil, err
	}
	port, uiPort := cmp.Or(p.port, ports[0]), cmp.Or(p.uiPort, ports[1])
	s := &cliServer{hostPort: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)),
		uiURL: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(uiPort)), log: filepath.Join(dir, "temporal-cli.log"),
		path: p.cli,
		// A database file, not the CLI's default in-memory one: a restart keeps the executions.
		args: []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(port),
			"--ui-port", strconv.Itoa(uiPort), "--db-filename", filepath.Join(dir, "temporal-cli.db"),
			// As cmd/temporal-dev: a stopping worker's polls end before they can be handed a task it would
			// never finish (servers without the setting ignore it).
			"--dynamic-config-value", temporalx.CancelPollsOnShutdown + "=true"}}
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// start runs the server and returns once it serves; on failure the process is gone.
func (s *cliServer) start(ctx context.Context) error {
	// Appended: a restart's output follows the first start's.
	log, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close() // the child has its own descriptor
	// Not CommandContext: the server lives until Stop, not until the start's context ends.
	cmd := exec.Command(s.path, s.args...)
	cmd.Stdout, cmd.Stderr = log, log
	// It dies with devstack, however devstack dies (it has no -exit-with-stdin).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	wctx, cancel := context.WithTimeout(ctx, temporalx.DefaultTimeout)
	defer cancel()
	err = s.child.Start(cmd, func(exited <-chan struct{}) error {
		s.exited = exited
		return temporalx.WaitReady(wctx, s.hostPort, s.Namespace(), exited)
	})
	if err != nil {
		s.exited = nil
		return fmt.Errorf("%s server start-dev on %s: %w; its output:\n%s", s.path, s.hostPort, err, s.output())
	}
	return nil
}

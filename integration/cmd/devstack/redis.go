package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/baton-run/baton/integration/redistest"
)

// redisServer is a real redis-server process or the in-process stand-in.
type redisServer struct {
	mode     string // redisReal or redisInprocess
	describe string // for the human line
	addr     string
	close    func() error
}

func (r *redisServer) Addr() string { return r.addr }

func (r *redisServer) Close() error { return r.close() }

// errNoInstall says why redis-server could not be installed.
var errNoInstall = errors.New("cannot install redis-server")

// startRedis starts the Redis server that o.redis asks for; in auto mode the real one if it is
// installed or can be installed, else the in-process stand-in.
func startRedis(ctx context.Context, o options) (*redisServer, error) {
	if o.redis == redisInprocess {
		return startInprocessRedis(o, "-redis=inprocess was given")
	}
	bin, err := findOrInstallRedis(ctx, o)
	if err != nil {
		if o.redis == redisReal {
			return nil, err
		}
		o.warn("%v", err)
		return startInprocessRedis(o, "redis-server is not installed")
	}
	srv, err := redistest.StartServer(redistest.Options{})
	if err != nil {
		return nil, err
	}
	if srv.External() {
		return nil, errors.Join(srv.Close(),
			fmt.Errorf("%s is set; unset it, devstack starts its own servers", redistest.EnvAddr))
	}
	return &redisServer{mode: redisReal, describe: "redis-server " + redisVersion(ctx, bin) + ", " + bin,
		addr: srv.Addr(), close: srv.Close}, nil
}

// findOrInstallRedis returns the path of redis-server, installing it with apt-get first if it is
// missing and o allows it.
func findOrInstallRedis(ctx context.Context, o options) (string, error) {
	bin, err := o.redisBinary()
	if err == nil {
		return bin, nil
	}
	if !o.installRedis {
		return "", fmt.Errorf("redis-server is not installed (and -install-redis=false)")
	}
	if err := installRedis(ctx, o); err != nil {
		return "", fmt.Errorf("redis-server is not installed: %w", err)
	}
	if bin, err = o.redisBinary(); err != nil {
		return "", fmt.Errorf("redis-server still not found after apt-get install: %w", err)
	}
	return bin, nil
}

// installRedis runs apt-get install redis-server, as root or through passwordless sudo, without
// prompts, bounded by o.installTimeout, its output on stderr.
func installRedis(ctx context.Context, o options) error {
	if _, err := exec.LookPath("apt-get"); err != nil {
		return fmt.Errorf("%w: no apt-get", errNoInstall)
	}
	apt := []string{"env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q",
		"--no-install-recommends", "-o", "DPkg::Lock::Timeout=30", "redis-server"}
	switch {
	case os.Geteuid() == 0:
	case sudoWorks(ctx):
		apt = append([]string{"sudo", "-n"}, apt...)
	default:
		return fmt.Errorf("%w: not root and no passwordless sudo", errNoInstall)
	}
	ctx, cancel := context.WithTimeout(ctx, o.installTimeout)
	defer cancel()
	o.warn("redis-server is not installed; running %s (at most %v)", strings.Join(apt, " "), o.installTimeout)
	cmd := exec.CommandContext(ctx, apt[0], apt[1:]...)
	cmd.Stdin = nil
	cmd.Stdout, cmd.Stderr = o.stderr, o.stderr
	// Interrupt apt-get rather than kill it, so that dpkg is not left half-way; kill only if it
	// does not stop.
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 15 * time.Second
	if err := cmd.Run(); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%v (%w)", err, ctx.Err())
		}
		return fmt.Errorf("%w: apt-get install: %w", errNoInstall, err)
	}
	return nil
}

func sudoWorks(ctx context.Context) bool {
	if _, err := exec.LookPath("sudo"); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "sudo", "-n", "true").Run() == nil
}

// redisVersion returns "7.0.15" from `redis-server --version`, or "?".
func redisVersion(ctx context.Context, bin string) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "?"
	}
	for _, f := range strings.Fields(string(out)) {
		if v, ok := strings.CutPrefix(f, "v="); ok {
			return v
		}
	}
	return "?"
}

// startInprocessRedis starts miniredis on a loopback port.
// why completes the NOTICE: "... stand-in, because <why>".
func startInprocessRedis(o options, why string) (*redisServer, error) {
	m := miniredis.NewMiniRedis()
	// By default miniredis only expires keys when told to (FastForward); a stand-in for a server
	// must let PEXPIRE'd keys (heartbeats, registry records) expire with the wall clock.
	m.ClockTTL(true)
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, err
	}
	o.warn("NOTICE: Redis at %s is an in-process stand-in (miniredis), because %s. Fault drills against "+
		"Redis (kill, pause, restart) need the real redis-server (apt-get install redis-server).", m.Addr(), why)
	return &redisServer{mode: redisInprocess, describe: "in-process miniredis stand-in, not redis-server",
		addr: m.Addr(), close: func() error { m.Close(); return nil }}, nil
}

// Package stack starts, on loopback, the real servers Baton needs -- an embedded etcd cluster, a
// Redis server and a Temporal server -- for tools/cmd/devstack, the demo and the drill: the one place that
// launches all three.
//
// Redis is the real redis-server when it is installed (`make deps` installs it). Otherwise, unless
// Options.Redis is RedisReal, an in-process Redis-compatible server (miniredis) stands in, and Start
// says so: it runs Baton's scripts, but it is not Redis, and fault drills against Redis (kill, pause,
// restart) need the real server.
//
// Like the helpers underneath (etcdx, redisx, and temporalx for the default Temporal), Start uses
// an already running server named by BATON_ETCD_ENDPOINTS, BATON_REDIS_ADDR or BATON_TEMPORAL_ADDRESS.
package stack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

// The Redis modes of Options.Redis.
const (
	RedisAuto      = "auto"      // the real server if it is installed, else the stand-in
	RedisReal      = "real"      // redis-server, or an error
	RedisInprocess = "inprocess" // the miniredis stand-in
)

// Options configures Start. The zero value is one etcd member, Redis in auto mode and Child.
type Options struct {
	EtcdMembers int
	// EtcdPort is the first etcd member's client port on 127.0.0.1 (member i's is EtcdPort+i),
	// RedisPort Redis's (the real server's or the stand-in's); default free ports.
	EtcdPort, RedisPort int
	Redis               string
	// RedisAppendOnly keeps Redis's data across a restart of the real server.
	RedisAppendOnly bool
	// Temporal starts the Temporal server, its data in dir; default Child.
	Temporal func(ctx context.Context, dir string) (Temporal, error)
	// TemporalStarting is what Say tells as the Temporal server starts; default the note on Child's
	// first start, which builds the server.
	TemporalStarting string
	// Dir is where the servers' data directory is made (removed by Close); default os.TempDir().
	Dir string
	// Say receives a human line per server as it is ready or stopped, Warn the notices (the
	// stand-in); both default to nothing.
	Say, Warn func(format string, args ...any)
	// RedisBinary finds redis-server; default redisx.Binary.
	RedisBinary func() (string, error)
}

// Temporal is a running Temporal server.
type Temporal interface {
	HostPort() string
	Namespace() string
	Close() error
}

// Stack is the running servers.
type Stack struct {
	Etcd *etcdx.Cluster
	// Redis is the real server; nil when the stand-in runs at RedisAddr.
	Redis     *redisx.Server
	RedisAddr string
	RedisMode string // RedisReal or RedisInprocess
	Temporal  Temporal

	o       Options
	closers []closer // in start order
}

type closer struct {
	name  string
	close func() error
}

// EnvVar is one BATON_* variable that points a client at the stack.
type EnvVar struct{ Name, Value string }

// Start starts etcd, Redis and Temporal, in that order: the cheap ones first, so that a missing
// redis-server is reported before the slow Temporal start. On failure, or when ctx ends before all
// are up, it stops what it started.
func Start(ctx context.Context, o Options) (_ *Stack, err error) {
	o = o.withDefaults()
	s := &Stack{o: o}
	defer func() {
		if err != nil {
			if cerr := s.Close(); cerr != nil {
				err = fmt.Errorf("%w (and stopping what had started: %v)", err, cerr)
			}
		}
	}()
	dir, err := os.MkdirTemp(o.Dir, "data-")
	if err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closer{"data dir", func() error { return os.RemoveAll(dir) }})

	t := time.Now()
	if s.Etcd, err = etcdx.StartCluster(etcdx.Options{Members: o.EtcdMembers, ClientPort: o.EtcdPort, Dir: filepath.Join(dir, "etcd")}); err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	s.closers = append(s.closers, closer{"etcd", s.Etcd.Close})
	o.Say("etcd      ready in %6s  %s (%d members, data in %s)", since(t), strings.Join(s.Etcd.Endpoints(), ","),
		s.Etcd.Size(), filepath.Join(dir, "etcd"))
	if err := interrupted(ctx); err != nil {
		return nil, err
	}

	t = time.Now()
	describe, err := s.startRedis(o)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	o.Say("redis     ready in %6s  %s (%s)", since(t), s.RedisAddr, describe)
	if err := interrupted(ctx); err != nil {
		return nil, err
	}

	t = time.Now()
	o.Say("temporal  %s", o.TemporalStarting)
	stop := sayWhile(o.Say, "temporal", t, 20*time.Second)
	s.Temporal, err = o.Temporal(ctx, dir)
	stop()
	if err != nil {
		return nil, fmt.Errorf("temporal: %w", err)
	}
	s.closers = append(s.closers, closer{"temporal", s.Temporal.Close})
	o.Say("temporal  ready in %6s  %s namespace %s", since(t), s.Temporal.HostPort(), s.Temporal.Namespace())
	return s, interrupted(ctx)
}

// Child runs the Temporal server as temporalx's child process, its database in dir: the default, so
// that a program that imports stack does not link the server.
func Child(ctx context.Context, dir string) (Temporal, error) {
	s, err := temporalx.StartServerContext(ctx, temporalx.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	return s, nil
}

func (o Options) withDefaults() Options {
	if o.EtcdMembers <= 0 {
		o.EtcdMembers = 1
	}
	if o.Redis == "" {
		o.Redis = RedisAuto
	}
	if o.Temporal == nil {
		o.Temporal = Child
	}
	if o.TemporalStarting == "" {
		o.TemporalStarting = "starting (the first run on a machine builds the server: several minutes; later runs reuse it)"
	}
	nop := func(string, ...any) {}
	if o.Say == nil {
		o.Say = nop
	}
	if o.Warn == nil {
		o.Warn = nop
	}
	if o.RedisBinary == nil {
		o.RedisBinary = redisx.Binary
	}
	return o
}

// startRedis starts the Redis server o.Redis asks for and returns its description.
func (s *Stack) startRedis(o Options) (string, error) {
	why := "-redis=inprocess was given"
	if o.Redis != RedisInprocess {
		bin, err := o.RedisBinary()
		if err == nil || os.Getenv(redisx.EnvAddr) != "" { // an external server needs no binary
			if s.Redis, err = redisx.StartServer(redisx.Options{AppendOnly: o.RedisAppendOnly, Port: o.RedisPort}); err != nil {
				return "", err
			}
			s.closers = append(s.closers, closer{"redis", s.Redis.Close})
			s.RedisAddr, s.RedisMode = s.Redis.Addr(), RedisReal
			return "redis-server " + bin, nil
		}
		if o.Redis == RedisReal {
			return "", fmt.Errorf("redis-server is not installed (make deps installs it): %w", err)
		}
		why = "redis-server is not installed (make deps installs it)"
	}
	m := miniredis.NewMiniRedis()
	// By default miniredis only expires keys when told to (FastForward); a stand-in for a server
	// must let PEXPIRE'd keys (heartbeats, registry records) expire with the wall clock.
	m.ClockTTL(true)
	if err := m.StartAddr(net.JoinHostPort("127.0.0.1", strconv.Itoa(o.RedisPort))); err != nil {
		return "", err
	}
	s.closers = append(s.closers, closer{"redis", func() error { m.Close(); return nil }})
	s.RedisAddr, s.RedisMode = m.Addr(), RedisInprocess
	o.Warn("NOTICE: Redis at %s is an in-process stand-in (miniredis), because %s. Fault drills against "+
		"Redis (kill, pause, restart) need the real redis-server.", m.Addr(), why)
	return "in-process miniredis stand-in, not redis-server", nil
}

func interrupted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted before every server was ready: %w", err)
	}
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// Env returns the BATON_* variables that point a client (or etcdx, redisx, temporalx) at the
// stack; BATON_DEVSTACK_REDIS says which Redis runs.
func (s *Stack) Env() []EnvVar {
	return []EnvVar{
		{"BATON_ETCD_ENDPOINTS", strings.Join(s.Etcd.Endpoints(), ",")},
		{"BATON_TEMPORAL_ADDRESS", s.Temporal.HostPort()},
		{"BATON_TEMPORAL_NAMESPACE", s.Temporal.Namespace()},
		{"BATON_REDIS_ADDR", s.RedisAddr},
		{"BATON_DEVSTACK_REDIS", s.RedisMode},
	}
}

// Close stops everything in reverse start order, each step bounded by 15 s, and returns the errors
// of all steps. It is idempotent.
func (s *Stack) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		c := s.closers[i]
		t := time.Now()
		if err := harness.Within(15*time.Second, c.close); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", c.name, err))
		} else if c.name != "data dir" {
			s.o.Say("%-9s stopped in %v", c.name, since(t))
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// sayWhile says every interval that name is still starting, until the returned stop is called (which
// waits for the goroutine): a first start that builds a server must not look hung.
func sayWhile(say func(format string, args ...any), name string, since0 time.Time, interval time.Duration) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				say("%-9s still starting after %v", name, since(since0))
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

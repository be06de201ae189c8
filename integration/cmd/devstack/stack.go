package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/baton-run/baton/integration/etcdtest"
	"github.com/baton-run/baton/integration/temporalx"
)

// stack is the set of running servers. Close stops them in reverse start order.
type stack struct {
	o        options
	dir      string // ours: etcd's data dirs live here
	etcd     *etcdtest.Cluster
	redis    *redisServer
	temporal *temporalx.Server
	env      []envVar
	closers  []closer // in start order
}

type closer struct {
	name  string
	close func() error
}

type envVar struct{ name, value string }

// start starts etcd, Redis and Temporal (in that order: the cheap ones first, so that a
// missing redis-server is reported before the slow Temporal start), prints their endpoints and
// writes the env file. On failure, or when ctx ends before all are up, it stops what it started.
func start(ctx context.Context, o options) (_ *stack, err error) {
	o = o.withDefaults()
	if err := o.validate(); err != nil {
		return nil, err
	}
	s := &stack{o: o}
	defer func() {
		if err != nil {
			if cerr := s.Close(); cerr != nil {
				err = fmt.Errorf("%w (and stopping what had started: %v)", err, cerr)
			}
		}
	}()
	began := time.Now()
	if o.envFile != "" {
		// A script waits for the file to appear: one left over by an earlier run must not count.
		if err := os.Remove(o.envFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("env file: %w", err)
		}
	}
	if s.dir, err = os.MkdirTemp(o.tmpDir, "data-"); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, closer{"data dir", func() error { return os.RemoveAll(s.dir) }})

	t := time.Now()
	s.etcd, err = etcdtest.StartCluster(etcdtest.Options{Members: o.etcdMembers, Dir: filepath.Join(s.dir, "etcd")})
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	s.closers = append(s.closers, closer{"etcd", s.etcd.Close})
	if s.etcd.External() {
		return nil, fmt.Errorf("etcd: %s is set; unset it, devstack starts its own servers", etcdtest.EnvEndpoints)
	}
	members := "1 member"
	if s.etcd.Size() != 1 {
		members = fmt.Sprintf("%d members", s.etcd.Size())
	}
	o.say("etcd      ready in %6s  %s (%s, embedded, data in %s)", since(t),
		strings.Join(s.etcd.Endpoints(), ","), members, filepath.Join(s.dir, "etcd"))
	if err := interrupted(ctx); err != nil {
		return nil, err
	}

	t = time.Now()
	if s.redis, err = startRedis(ctx, o); err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	s.closers = append(s.closers, closer{"redis", s.redis.Close})
	o.say("redis     ready in %6s  %s (%s)", since(t), s.redis.Addr(), s.redis.describe)
	if err := interrupted(ctx); err != nil {
		return nil, err
	}

	t = time.Now()
	if s.temporal, err = temporalx.StartServer(temporalx.Options{}); err != nil {
		return nil, fmt.Errorf("temporal: %w", err)
	}
	s.closers = append(s.closers, closer{"temporal", s.temporal.Close})
	if s.temporal.External() {
		return nil, fmt.Errorf("temporal: %s is set; unset it, devstack starts its own servers", temporalx.EnvAddress)
	}
	o.say("temporal  ready in %6s  %s namespace %s (in-process temporaltest, SQLite in memory)", since(t),
		s.temporal.HostPort(), s.temporal.Namespace())
	if err := interrupted(ctx); err != nil {
		return nil, err
	}

	s.env = []envVar{
		{"BATON_ETCD_ENDPOINTS", strings.Join(s.etcd.Endpoints(), ",")},
		{"BATON_TEMPORAL_ADDRESS", s.temporal.HostPort()},
		{"BATON_TEMPORAL_NAMESPACE", s.temporal.Namespace()},
		{"BATON_REDIS_ADDR", s.redis.Addr()},
		{"BATON_DEVSTACK_REDIS", s.redis.mode},
	}
	if o.envFile != "" {
		if err := writeEnvFile(o.envFile, s.env); err != nil {
			return nil, fmt.Errorf("env file: %w", err)
		}
		s.closers = append(s.closers, closer{"env file", func() error {
			if err := os.Remove(o.envFile); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
			return nil
		}})
	}
	fmt.Fprint(o.stdout, formatEnv(s.env))
	where := ""
	if o.envFile != "" {
		where = "; wrote " + o.envFile
	}
	o.say("ready in %v%s; SIGINT (Ctrl-C) or SIGTERM stops everything", since(began), where)
	return s, nil
}

func interrupted(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("interrupted before every server was ready: %w", err)
	}
	return nil
}

func since(t time.Time) time.Duration {
	switch d := time.Since(t); {
	case d < time.Millisecond:
		return d.Round(time.Microsecond)
	case d < time.Second:
		return d.Round(time.Millisecond)
	default:
		return d.Round(100 * time.Millisecond)
	}
}

// Env returns the BATON_* variables, in the order they are printed.
func (s *stack) Env() []envVar { return append([]envVar(nil), s.env...) }

// Close stops everything in reverse start order, each step bounded by closeTimeout, and returns
// the errors of all steps. It is idempotent.
func (s *stack) Close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		c := s.closers[i]
		t := time.Now()
		if err := within(s.o.closeTimeout, c.close); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", c.name, err))
			continue
		}
		if c.name == "etcd" || c.name == "redis" || c.name == "temporal" {
			s.o.say("%-9s stopped in %v", c.name, since(t))
		}
	}
	s.closers = nil
	return errors.Join(errs...)
}

// within runs f and waits for it at most d. On timeout f is left running: this only happens at
// shutdown, and the process exits right after.
func within(d time.Duration, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return fmt.Errorf("not done after %v", d)
	}
}

// formatEnv renders the variables as NAME=value lines that sh can source and docker's
// --env-file reads alike (values are quoted only when they must be).
func formatEnv(vars []envVar) string {
	var b strings.Builder
	for _, v := range vars {
		fmt.Fprintf(&b, "%s=%s\n", v.name, shellQuote(v.value))
	}
	return b.String()
}

func shellQuote(v string) string {
	safe := v != ""
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-.,:/@%+=", r)) {
			safe = false
			break
		}
	}
	if safe {
		return v
	}
	return "'" + strings.ReplaceAll(v, "'", `'\''`) + "'"
}

// writeEnvFile writes the file atomically (temp file in the same dir, fsync, rename), so that a
// reader that sees the file sees all of it.
func writeEnvFile(path string, vars []envVar) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if _, err = f.WriteString(formatEnv(vars)); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

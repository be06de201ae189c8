package temporalx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/baton-run/baton/integration/testkit"
)

// errExited: the child exited before it served.
var errExited = errors.New("temporalx: server process exited before it served")

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
	c, err := testkit.StartChild(cmd)
	if err != nil {
		return fmt.Errorf("temporalx: start server %s: %w", s.bin, err)
	}
	s.mu.Lock()
	s.child = c
	s.mu.Unlock()
	if err := s.waitReady(ctx, c.Exited()); err != nil {
		s.stop(syscall.SIGKILL)
		return err
	}
	return nil
}

// encodeDynamicConfig is opts.DynamicConfig as cmd/temporal-dev's -dynamic-config: YAML, in which
// a time.Duration is its string ("1.5s"), which the server parses, not nanoseconds, which it would
// take for seconds.
func encodeDynamicConfig(dc map[string]any) (string, error) {
	b, err := yaml.Marshal(dc)
	if err != nil {
		return "", fmt.Errorf("temporalx: Options.DynamicConfig: want values YAML can carry: %w", err)
	}
	return string(b), nil
}

// Stop stops the server gracefully (SIGTERM; the frontend port is closed
// once it returns). Clients and workers are not closed: their calls then
// fail with serviceerror.Unavailable ("connection refused") once the SDK's
// retries give up, so bound calls with a context deadline. Stopping a
// stopped server is a no-op. It returns ErrExternal for an external server.
func (s *Server) Stop() error {
	if s.external {
		return ErrExternal
	}
	s.stop(syscall.SIGTERM)
	return nil
}

// Kill stops the server as a crash does (SIGKILL): what it had not
// written to its database is lost. It returns ErrExternal for an external
// server.
func (s *Server) Kill() error {
	if s.external {
		return ErrExternal
	}
	s.stop(syscall.SIGKILL)
	return nil
}

// stop signals the child and waits for it to exit; a child that has not exited 25 s after SIGTERM
// is killed.
func (s *Server) stop(sig syscall.Signal) {
	s.mu.Lock()
	c := s.child
	s.child = nil
	s.mu.Unlock()
	if c != nil {
		c.Stop(sig, 25*time.Second)
	}
}

// Restart starts a stopped (or killed) server again, on the same address
// and database: it comes back with its namespaces and executions. A
// running server is stopped first. It returns once the namespace is usable,
// retrying while ctx lasts (a port taken in between by someone else may be
// freed). It returns ErrExternal for an external server.
func (s *Server) Restart(ctx context.Context) error {
	if s.external {
		return ErrExternal
	}
	s.stop(syscall.SIGTERM)
	for {
		err := s.start(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// Close stops the server (if not yet stopped) and removes its database,
// unless Options.Dir was given. Close is idempotent and does nothing for
// an external server.
func (s *Server) Close() error {
	if s.external {
		return nil
	}
	s.mu.Lock()
	closed := s.closed
	s.closed = true
	s.mu.Unlock()
	if closed {
		return nil
	}
	if s.opts.Dir != "" {
		s.stop(syscall.SIGTERM)
		return nil
	}
	s.stop(syscall.SIGKILL) // nobody reads the data again
	return os.RemoveAll(s.dir)
}

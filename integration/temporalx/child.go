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
	return s.child.Start(cmd, func(exited <-chan struct{}) error { return s.waitReady(ctx, exited) })
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
func (s *Server) Stop() error { return s.stop(syscall.SIGTERM) }

// Kill stops the server as a crash does (SIGKILL): what it had not
// written to its database is lost. It returns ErrExternal for an external
// server.
func (s *Server) Kill() error { return s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) error {
	if s.external {
		return ErrExternal
	}
	s.child.Stop(sig, 25*time.Second)
	return nil
}

// Restart starts a stopped (or killed) server again, on the same address
// and database: it comes back with its namespaces and executions. A
// running server is stopped first. It returns once the namespace is usable,
// retrying while ctx lasts (a port taken in between by someone else may be
// freed). It returns ErrExternal for an external server.
func (s *Server) Restart(ctx context.Context) error {
	if err := s.Stop(); err != nil {
		return err
	}
	return testkit.Poll(ctx, 0, 500*time.Millisecond, func() error { return s.start(ctx) })
}

// Close stops the server (if not yet stopped) and removes its database,
// unless Options.Dir was given. Close is idempotent and does nothing for
// an external server.
func (s *Server) Close() (err error) {
	if s.external {
		return nil
	}
	s.closeOnce.Do(func() {
		if s.opts.Dir != "" {
			err = s.Stop()
			return
		}
		_ = s.Kill() // nobody reads the data again
		err = os.RemoveAll(s.dir)
	})
	return err
}

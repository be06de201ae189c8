package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/baton-run/baton/integration/servers/temporalx"
)

// restartTimeout bounds a restarted Temporal server's start, after its -down time: a frontend port
// taken in the meantime by another program must not keep a restart waiting for ever.
const restartTimeout = 2 * time.Minute

// restartable is a Temporal server that devstack can restart on the same port and database: Baton's
// own (temporalx) and the Temporal CLI's dev server.
type restartable interface {
	// Stop stops the server and waits for its process; its database stays.
	Stop() error
	// Restart starts it again, on the same port and database, and returns once it serves.
	Restart(ctx context.Context) error
}

var _ restartable = (*temporalx.Server)(nil)

// restartRequest asks the running devstack to restart its Temporal server: from `devstack restart
// temporal` through the control socket, or from SIGUSR1.
type restartRequest struct {
	down   time.Duration                 // how long the server stays down before it starts again
	say    func(format string, a ...any) // where the restart's progress goes, besides devstack's output
	isDown func()                        // called once the server is stopped and kept down for down
	done   chan<- error                  // receives the restart's result (buffered); nil: nobody waits
}

// restartTemporal stops the Temporal server, keeps it down for down, and starts it again on the same
// port and database, so that its executions survive; etcd and Redis are not touched. It returns once
// the server serves again. When the start fails, the server stays down and a later restart may
// start it.
func (d *devstack) restartTemporal(ctx context.Context, down time.Duration, say func(format string, a ...any), isDown func()) error {
	r, ok := d.Temporal.(restartable)
	if !ok {
		return fmt.Errorf("the Temporal server (%T) cannot be restarted", d.Temporal)
	}
	t := time.Now()
	say("temporal  restarting %s: stopping it (etcd and Redis stay up)", d.Temporal.HostPort())
	if err := r.Stop(); err != nil {
		return fmt.Errorf("stop temporal: %w", err)
	}
	say("temporal  stopped in %v", since(t))
	if down > 0 {
		say("temporal  kept down for %v (-down)", down)
		if isDown != nil {
			isDown()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted while temporal was down: %w", ctx.Err())
		case <-time.After(down):
		}
	}
	t = time.Now()
	rctx, cancel := context.WithTimeout(ctx, restartTimeout)
	defer cancel()
	if err := r.Restart(rctx); err != nil {
		return fmt.Errorf("temporal did not serve again (it stays down; etcd and Redis are up; "+
			"`devstack restart temporal` tries again): %w", err)
	}
	say("temporal  serving again in %v  %s namespace %s, same port and database", since(t), d.Temporal.HostPort(), d.Temporal.Namespace())
	d.restarts.Add(1)
	return nil
}

func since(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }

// restartTarget is what `devstack restart` restarts: only the Temporal server, the one whose
// incidents a team rehearses (etcd is embedded in devstack; redisx restarts Redis in tests).
const restartTarget = "temporal"

// parseRestart parses the arguments of `devstack restart`: `temporal [-down D]` or `[-down D] temporal`.
func parseRestart(args []string, output io.Writer) (down time.Duration, err error) {
	fs := flag.NewFlagSet("devstack restart", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.DurationVar(&down, "down", 0, "keep the Temporal server down this long before starting it again, "+
		"as in an incident (e.g. 3s; default: start it again at once)")
	fs.Usage = func() {
		fmt.Fprintf(output, "Usage: devstack restart %s [-down DURATION]\n\nRestarts the running devstack's Temporal server "+
			"on the same port and database (etcd and Redis stay up) and returns once it serves again.\n\n", restartTarget)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 0, err
	}
	if fs.NArg() == 0 || fs.Arg(0) != restartTarget {
		return 0, fmt.Errorf("restart %q: want `devstack restart %s [-down DURATION]`: only the Temporal server restarts "+
			"(etcd and Redis stay up)", fs.Args(), restartTarget)
	}
	if err := fs.Parse(fs.Args()[1:]); err != nil { // the flags after the target
		return 0, err
	}
	if fs.NArg() > 0 {
		return 0, fmt.Errorf("restart %s: unexpected arguments %q", restartTarget, fs.Args())
	}
	if down < 0 {
		return 0, fmt.Errorf("-down=%v: want 0 or more (how long the Temporal server stays down)", down)
	}
	return down, nil
}

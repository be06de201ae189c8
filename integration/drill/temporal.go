package drill

import (
	"context"
	"path/filepath"
	"time"

	"github.com/baton-run/baton/integration/temporalx"
)

// temporalServer is the Temporal server the workers use: temporalx's child process, its database and
// log in the drill's directory, which the drill restarts (SIGTERM or SIGKILL) and which comes back on
// the same address with the same executions; or an external server (BATON_TEMPORAL_ADDRESS), which
// it cannot restart.
type temporalServer struct {
	*temporalx.Server
	hostPort, namespace string
}

// startTemporal starts the server (or wraps the external one) and waits until the namespace is
// usable.
func startTemporal(ctx context.Context, dir, namespace string, timeout time.Duration) (*temporalServer, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := temporalx.StartServerContext(ctx, temporalx.Options{Namespace: namespace, Dir: dir,
		LogFile: filepath.Join(dir, "temporal.log"), DynamicConfig: map[string]any{
			// The drill reads visibility several times a second; the default is 10 per second.
			"frontend.namespaceRPS.visibility":        1000,
			"frontend.namespaceBurstRatio.visibility": 1,
		}})
	if err != nil {
		return nil, err
	}
	return &temporalServer{Server: s, hostPort: s.HostPort(), namespace: s.Namespace()}, nil
}

func (t *temporalServer) canRestart() bool { return !t.External() }

// restart stops the server (a crash: SIGKILL), waits down, and starts it again on the same address
// and database.
func (t *temporalServer) restart(ctx context.Context, crash bool, down, timeout time.Duration) error {
	stop := t.Stop
	if crash {
		stop = t.Kill
	}
	if err := stop(); err != nil {
		return err
	}
	if !sleepCtx(ctx, down) {
		return ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return t.Restart(ctx)
}

// Command temporal-dev runs a Temporal server (temporalserve: v1.32.1 with the Temporal CLI dev
// server's configuration) until SIGTERM or SIGINT. temporalx starts it as a child process for the
// integration tests, the benchmarks and the drill, so that their binaries do not link the server and
// the server does not run under their race detector. By hand:
//
//	go run ./cmd/temporal-dev -db /tmp/temporal.db -frontend-port 7233
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton/integration/temporalserve"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "temporal-dev:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	var c temporalserve.Config
	fs := flag.NewFlagSet("temporal-dev", flag.ContinueOnError)
	fs.StringVar(&c.DB, "db", "", "SQLite database `file`, created when missing; a server started again on it keeps its data (default: in memory)")
	fs.StringVar(&c.Namespace, "namespace", "default", "namespace created at start when missing")
	fs.IntVar(&c.Frontend, "frontend-port", 0, "frontend port on "+temporalserve.Host+", the one clients dial (default: a free one)")
	fs.IntVar(&c.History, "history-port", 0, "history service port (default: a free one)")
	fs.IntVar(&c.Matching, "matching-port", 0, "matching service port (default: a free one)")
	fs.IntVar(&c.Worker, "worker-port", 0, "worker service port (default: a free one)")
	dynamic := fs.String("dynamic-config", "", `dynamic config overrides, a JSON object, e.g. {"history.workflowIdReuseMinimalInterval": "100ms"}`)
	level := zap.InfoLevel
	fs.Var(&level, "log-level", "level of the server's log on stderr")
	exitWithStdin := fs.Bool("exit-with-stdin", false, "exit at once when stdin closes: the process that started the server holds the other end, so the server ends with it, even when that process is killed")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	var err error
	if c.DynamicConfig, err = parseDynamicConfig(*dynamic); err != nil {
		return err
	}
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.ISO8601TimeEncoder
	c.Logger = zap.New(zapcore.NewCore(zapcore.NewConsoleEncoder(enc), zapcore.Lock(os.Stderr), level))

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	if *exitWithStdin {
		// The process exits from here: nothing is left to stop for a starter that is gone.
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			c.Logger.Warn("stdin closed: the starter is gone, exiting")
			os.Exit(1)
		}()
	}
	srv, err := temporalserve.Start(c)
	if err != nil {
		return err
	}
	c.Logger.Info("temporal-dev serving", zap.String("frontend", srv.HostPort()), zap.String("namespace", c.Namespace), zap.String("db", c.DB))
	sig := <-sigs
	c.Logger.Info("temporal-dev stopping", zap.Stringer("signal", sig))
	done := make(chan error, 1)
	go func() { done <- srv.Stop() }()
	select {
	case err := <-done:
		return err
	case <-time.After(20 * time.Second):
		return errors.New("server stop took more than 20s")
	}
}

// parseDynamicConfig decodes the -dynamic-config object. JSON has only one kind of number, the
// server's settings take an int or a float: a whole number is an int.
func parseDynamicConfig(s string) (map[string]any, error) {
	if s == "" {
		return nil, nil
	}
	d := json.NewDecoder(bytes.NewReader([]byte(s)))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return nil, fmt.Errorf("-dynamic-config: want a JSON object of setting -> value: %w", err)
	}
	for k, v := range m {
		n, ok := v.(json.Number)
		if !ok {
			continue
		}
		if i, err := n.Int64(); err == nil {
			m[k] = int(i)
		} else if m[k], err = n.Float64(); err != nil {
			return nil, fmt.Errorf("-dynamic-config: %s: %w", k, err)
		}
	}
	return m, nil
}

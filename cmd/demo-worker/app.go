package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.opentelemetry.io/otel/metric"
	"go.temporal.io/sdk/client"
	"go.uber.org/dig"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/internal/opscli"
)

// runWorker is `demo-worker run`.
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseRun(args, stdout)
	switch {
	case errors.Is(err, opscli.ErrHelp):
		return exitOK
	case err != nil:
		fmt.Fprintf(stderr, "demo-worker: %v\n", err)
		return exitConfig
	}
	log := newLogger(stderr, o.logLevel)
	defer func() { _ = log.Sync() }()
	if links := baton.ServiceLinkEnv(os.Environ()); len(links) > 0 {
		// Ignored by the loaders; said once, since they mean the pod spec lacks the setting.
		log.Warn("ignoring Kubernetes service-link variables: set enableServiceLinks: false in the pod spec", zap.Strings("variables", links))
	}
	redis.SetLogger(redisLog{log.Named("redis")})

	if o.events == "stdout" {
		o.Cfg.Events = eventWriter(stdout)
	}
	app := fx.New(appOptions(o, log)...)
	if err := app.Err(); err != nil {
		// The cause alone: Fx's wrapping names every constructor on the way to it.
		log.Error("building the application failed", zap.Error(dig.RootCause(err)))
		return exitStartError
	}
	startCtx, cancel := context.WithTimeout(ctx, o.startTimeout)
	err = app.Start(startCtx) // on failure Fx stops what had started
	cancel()
	if err != nil {
		log.Error("start failed", zap.Error(err))
		return exitStartError
	}
	log.Info("demo worker started", zap.String("http_addr", o.httpAddr))

	select {
	case <-ctx.Done():
		log.Info("stopping on signal", zap.Duration("shutdown_timeout", o.shutdownTimeout))
	case sig := <-app.Wait():
		log.Info("stopping", zap.String("signal", sig.Signal.String()))
	}
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.shutdownTimeout)
	defer cancel()
	began := time.Now()
	if err := app.Stop(stopCtx); err != nil {
		log.Error("stop was not clean", zap.Duration("took", time.Since(began)), zap.Error(err))
		return exitUnclean
	}
	log.Info("demo worker stopped cleanly", zap.Duration("took", time.Since(began)))
	return exitOK
}

// appOptions wires the worker.
//
// Fx runs OnStop hooks in the reverse order of their registration, and a hook is registered when its
// constructor or invoke runs. The stop must go:
//
//  1. The Temporal workers stop polling at once, then finish the tasks they hold (at most their
//     drain timeout). While they drain, this process still leads its queues; its runs' next tasks go
//     to the other workers, which poll the same task queues.
//  2. The Node resigns every term: the step-down ends its own runs and a follower takes over in
//     milliseconds.
//  3. The HTTP server, then the meter provider and the clients.
//
// The other order strands work. Resigning first lets the successor start its run while this
// process still polls: the successor's first tasks can land on a worker about to stop, which (on a
// server that cancels polls on shutdown rather than completing them) takes a task and exits without
// finishing it, so the new run waits for the workflow task timeout; and the successor's takeover
// terminates this process's run while its tasks are still draining here. Stopping the pollers
// first, nothing new reaches this process, and what it drains belongs to runs that are still alive.
//
// So the HTTP server (and, through buildSharedFirst, the clients) are registered first, then the
// Node (fxmodule.Module's invoke builds it), then the Temporal workers, which take the Node as an
// argument so that they are built after it: they start last and stop first. The routes that need
// the Node are added by a root invoke, which does not register a hook. The pod-deletion-cost
// updater (-pod-deletion-cost), registered after the workers, starts last and stops first of all.
func appOptions(o runOptions, log *zap.Logger) []fx.Option {
	load := newDispatchLoad(o.Cfg.Queues)
	o.Cfg.Load = load.report
	return []fx.Option{
		fx.Supply(o.Cfg, o.Clients, o, load),
		fx.Provide(func() *zap.Logger { return log }, newMeterProvider),
		fx.WithLogger(func() fxevent.Logger {
			l := &fxevent.ZapLogger{Logger: log.Named("fx")}
			// Fx's own events only with -log-level=debug, its errors too: each restates the error
			// the worker logs once, with its cause, when the start fails.
			l.UseLogLevel(zapcore.DebugLevel)
			l.UseErrorLevel(zapcore.DebugLevel)
			return l
		}),
		fx.StartTimeout(o.startTimeout),
		fx.StopTimeout(o.shutdownTimeout),
		fxmodule.Clients,
		fx.Module("demo-worker",
			fx.Provide(newHTTPServer),
			fx.Invoke(buildSharedFirst, func(*httpServer) {}),
		),
		fxmodule.Module,
		fx.Invoke(startTemporalWorkers, routeNode, startPodCost),
	}
}

// buildSharedFirst builds the clients and the meter provider before any other hook is registered, so
// that they close last, and so that a failed start (Fx stops only the hooks that had started) still
// closes every one of them.
func buildSharedFirst(*clientv3.Client, client.Client, redis.UniversalClient, metric.MeterProvider) {}

// newLogger writes JSON lines (zap's production encoding, RFC 3339 times) to w.
func newLogger(w io.Writer, level zapcore.Level) *zap.Logger {
	enc := zap.NewProductionEncoderConfig()
	enc.EncodeTime = zapcore.RFC3339NanoTimeEncoder
	enc.EncodeDuration = zapcore.StringDurationEncoder
	core := zapcore.NewCore(zapcore.NewJSONEncoder(enc), zapcore.Lock(zapcore.AddSync(w)), level)
	return zap.New(core, zap.AddCaller(), zap.AddStacktrace(zapcore.DPanicLevel))
}

// logStartup logs the effective settings in one line: o as parsed, with the defaults of effective
// (the Node's configuration). Secrets are never among them: only whether one is set.
func logStartup(log *zap.Logger, o runOptions, effective baton.Config) {
	c, cl := effective, o.Clients
	ttl := c.Election.TTL
	if ttl == 0 {
		ttl = election.DefaultConfig().TTL
	}
	log.Info("demo worker starting",
		zap.String("project", c.Project),
		zap.Strings("queues", c.Queues),
		zap.String("server_id", c.ServerID),
		zap.String("dispatcher_task_queue", c.Takeover.TaskQueue),
		zap.Strings("etcd_endpoints", cl.EtcdEndpoints),
		zap.String("etcd_username", cl.EtcdUsername),
		zap.Bool("etcd_password_set", cl.EtcdPassword != ""),
		zap.Bool("etcd_tls", tlsOn(cl.EtcdTLS)),
		zap.String("temporal_address", orDefault(cl.TemporalAddress, clients.DefaultTemporalAddress)),
		zap.String("temporal_namespace", orDefault(cl.TemporalNamespace, clients.DefaultTemporalNamespace)),
		zap.Bool("temporal_api_key_set", cl.TemporalAPIKey != ""),
		zap.Bool("temporal_tls", tlsOn(cl.TemporalTLS) || (cl.TemporalAPIKey != "" && !cl.TemporalTLSDisabled)),
		zap.String("redis_addr", orDefault(cl.RedisAddr, clients.DefaultRedisAddr)),
		zap.String("redis_username", cl.RedisUsername),
		zap.Bool("redis_password_set", cl.RedisPassword != ""),
		zap.Bool("redis_tls", tlsOn(cl.RedisTLS)),
		zap.String("http_addr", o.httpAddr),
		zap.Duration("election_ttl", ttl),
		zap.Duration("heartbeat_interval", c.Heartbeat.Interval),
		zap.Duration("reconcile_interval", c.Reconciler.Interval),
		zap.Duration("stale_after", c.Reconciler.StaleAfter),
		zap.Duration("registry_heartbeat_interval", c.Registry.HeartbeatInterval),
		zap.Duration("shutdown_timeout", o.shutdownTimeout),
	)
}

func tlsOn(t clients.TLSFiles) bool { return t.Enabled || t.CAFile != "" || t.CertFile != "" }

func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// redisLog routes go-redis's own messages (connection pool failures) to zap instead of plain lines
// on stderr, at debug level: each repeats, dial by dial, a failure Baton reports once with its
// consequence (Redis not reachable, heartbeats failing, readiness red). A nil logger drops them.
// go-redis has one process-wide logger, which main owns.
type redisLog struct{ log *zap.Logger }

func (r redisLog) Printf(_ context.Context, format string, v ...any) {
	if r.log != nil {
		r.log.Debug(fmt.Sprintf(format, v...))
	}
}

// eventWriter is a Sink that writes each event as one JSON line on w (-events stdout).
func eventWriter(w io.Writer) event.Sink {
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	return func(e event.Event) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e) // a tool that stopped reading must not stop the worker
	}
}

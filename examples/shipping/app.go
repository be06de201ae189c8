package shipping

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	clientv3 "go.etcd.io/etcd/client/v3"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// Options configure the app.
type Options struct {
	// Baton is Baton's configuration; Module sets its workflow type and start hook.
	Baton baton.Config
	// Region goes into every dispatcher run's Input.
	Region string
	// HTTPAddr is where /metrics, /healthz, /readyz and /leading are served, e.g. ":9090".
	HTTPAddr string
	// Handler ships one dispatch request; it must be idempotent by key (see dispatcher.Handler).
	// Default: it logs the request.
	Handler dispatcher.Handler
	// Tuning is the dispatcher runs' tuning (history limit, concurrency, carry-over page).
	Tuning dispatcher.RegisterOptions
}

// Module is the app: Baton, its listener and metrics, the Temporal workers and the HTTP endpoints.
// The app provides the clients (or adds fxmodule.Clients) and a *zap.Logger.
func Module(o Options) fx.Option {
	cfg := o.Baton
	cfg.Takeover.WorkflowType = WorkflowType
	cfg.Takeover.Start = func(_ context.Context, s *takeover.Start) error {
		in := Input{Input: dispatcher.Input{Owner: s.Owner}, Region: o.Region, BatchSize: 100}
		in.HistoryLimit, in.MaxConcurrent, in.BacklogPage = o.Tuning.HistoryLimit, o.Tuning.MaxConcurrent, o.Tuning.BacklogPage
		in.RecentKeys = o.Tuning.RecentKeys
		s.Args = []any{in}
		s.Options.Memo["shipping.region"] = o.Region
		return nil
	}
	return fx.Module("shipping",
		fx.Supply(cfg, o),
		fxmodule.Module,
		fx.Provide(newMeterProvider, newLeadership, fxmodule.AsListener(listener), serveHTTP),
		fx.Invoke(startWorkers, func(*Server) {}),
	)
}

// metrics is the app's own Prometheus registry, so the process serves only what it registered.
type metrics struct {
	registry *prometheus.Registry
}

// newMeterProvider exports Baton's metrics (baton_*) to Prometheus through the OpenTelemetry exporter.
func newMeterProvider(lc fx.Lifecycle) (*sdkmetric.MeterProvider, *metrics, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	lc.Append(fx.StopHook(mp.Shutdown))
	return mp, &metrics{registry: reg}, nil
}

// Leadership is what the listener heard: the queues this process leads, with their tokens.
type Leadership struct {
	mu      sync.Mutex
	leading map[string]int64
}

func newLeadership() *Leadership { return &Leadership{leading: map[string]int64{}} }

// Leading returns the queues this process leads and their tokens.
func (l *Leadership) Leading() map[string]int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int64, len(l.leading))
	for q, t := range l.leading {
		out[q] = t
	}
	return out
}

// listener records each term and logs it. Callbacks return at once: work tied to a term would run in
// a goroutine under the ctx OnStartedLeading gets, which ends with the term.
func listener(l *Leadership, log *zap.Logger) baton.Listener {
	return baton.Listener{
		OnStartedLeading: func(_ context.Context, lead baton.Lead) {
			l.mu.Lock()
			l.leading[lead.Queue] = lead.Token
			l.mu.Unlock()
			log.Info("leading", zap.String("queue", lead.Queue), zap.Int64("token", lead.Token), zap.String("run_id", lead.Run.RunID))
		},
		OnStoppedLeading: func(queue string, cause error) {
			l.mu.Lock()
			delete(l.leading, queue)
			l.mu.Unlock()
			log.Info("stopped leading", zap.String("queue", queue), zap.NamedError("cause", cause))
		},
	}
}

type workerParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    baton.Config
	Options   Options
	Temporal  client.Client
	Etcd      *clientv3.Client
	Log       *zap.Logger
	// Node is taken so that the workers' hooks come after the Node's: on stop, the workers stop
	// before the Node hands its queues over.
	Node *baton.Node
}

// startWorkers runs the dispatcher workflow, the app's activities and Baton's dispatch activities
// (the etcd ledger, the handler) on each queue's task queue; the ledger's health is part of /readyz.
func startWorkers(p workerParams) error {
	acts := &Activities{Etcd: p.Etcd}
	dl, err := ledger.New(p.Etcd, ledger.Config{})
	if err != nil {
		return err
	}
	if err := p.Node.AddReadinessCheck("dispatch-ledger", dl.Check); err != nil {
		return err
	}
	handler := p.Options.Handler
	if handler == nil {
		log := p.Log.Named("dispatch")
		handler = func(_ context.Context, key string, req dispatcher.Request, owner takeover.Owner) error {
			log.Info("shipping", zap.String("key", key), zap.String("type", req.Type), zap.String("task_id", req.TaskID),
				zap.String("queue", owner.Queue), zap.Int64("token", owner.Token))
			return nil
		}
	}
	dispatch := &dispatcher.Activities{Ledger: dl, Handler: handler, History: p.Temporal}
	queues := make([]string, len(p.Config.Queues))
	workers := make([]worker.Worker, len(queues))
	for i, q := range p.Config.Queues {
		queues[i] = takeover.DefaultTaskQueue(p.Config.Project, q)
		workers[i] = worker.New(p.Temporal, queues[i], dispatcher.WorkerOptions(worker.Options{}))
		workers[i].RegisterWorkflowWithOptions(Dispatcher, workflow.RegisterOptions{Name: WorkflowType})
		workers[i].RegisterActivity(acts)
		if err := dispatcher.RegisterActivities(workers[i], dispatch); err != nil {
			return err
		}
	}
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			for i, w := range workers {
				if err := w.Start(); err != nil {
					for _, started := range workers[:i] {
						started.Stop()
					}
					return fmt.Errorf("temporal worker for %s: %w", queues[i], err)
				}
			}
			return nil
		},
		OnStop: func(ctx context.Context) error {
			// The runs this process leads finish their dispatches while its workers still serve
			// them; the Node's step-down, after this hook, then ends them without waiting.
			p.Node.Quiesce(ctx)
			for _, w := range workers {
				w.Stop()
			}
			return nil
		},
	})
	return nil
}

// Server is the app's HTTP server; Addr is where it listens once the app started.
type Server struct {
	mu   sync.Mutex
	addr string
}

// Addr returns the address the server listens on, empty before the app started.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

type httpParams struct {
	fx.In
	Lifecycle  fx.Lifecycle
	Options    Options
	Node       *baton.Node
	Metrics    *metrics
	Leadership *Leadership
	Log        *zap.Logger
}

// serveHTTP serves /metrics, /healthz, /readyz and /leading; a port in use fails the start.
func serveHTTP(p httpParams) *Server {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(p.Metrics.registry, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", p.Node.LivenessCheck())
	mux.Handle("/readyz", p.Node.ReadinessCheck())
	mux.HandleFunc("/leading", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Leadership.Leading())
	})
	srv := &http.Server{Addr: p.Options.HTTPAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	s := &Server{}
	done := make(chan struct{})
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", srv.Addr)
			if err != nil {
				return err
			}
			s.mu.Lock()
			s.addr = ln.Addr().String()
			s.mu.Unlock()
			go func() {
				defer close(done)
				if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
					p.Log.Error("http server stopped", zap.Error(err))
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			err := srv.Shutdown(ctx)
			<-done
			return err
		},
	})
	return s
}

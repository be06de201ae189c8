package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
)

// meterOut is the OpenTelemetry meter provider every component reports to, and the Prometheus
// registry its exporter writes to (its own, not the global one).
type meterOut struct {
	fx.Out
	Provider metric.MeterProvider
	Registry *prometheus.Registry
}

func newMeterProvider(lc fx.Lifecycle, o runOptions) (meterOut, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return meterOut{}, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(resource.NewSchemaless(
		attribute.String("service.name", "baton-demo-worker"),
		attribute.String("service.instance.id", o.Cfg.ServerID),
	)))
	lc.Append(fx.StopHook(mp.Shutdown))
	return meterOut{Provider: mp, Registry: reg}, nil
}

// httpServer serves /metrics, and the Node's routes once routeNode has added them.
type httpServer struct {
	mux *http.ServeMux
	srv *http.Server
}

func newHTTPServer(lc fx.Lifecycle, o runOptions, reg *prometheus.Registry, log *zap.Logger) *httpServer {
	log = log.Named("http")
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(log)}))
	h := &httpServer{mux: mux, srv: &http.Server{
		Addr:              o.httpAddr,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          zap.NewStdLog(log),
	}}
	done := make(chan struct{})
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			// Listen here, so that a busy port fails the start; serve in the background.
			ln, err := net.Listen("tcp", o.httpAddr)
			if err != nil {
				return fmt.Errorf("http: %w", err)
			}
			log.Info("http listening", zap.String("addr", ln.Addr().String()))
			go func() {
				defer close(done)
				if err := h.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
					log.Error("http server failed", zap.Error(err))
				}
			}()
			return nil
		},
		OnStop: func(ctx context.Context) error {
			err := h.srv.Shutdown(ctx)
			select {
			case <-done:
			case <-ctx.Done():
			}
			if err != nil {
				return fmt.Errorf("http shutdown: %w", err)
			}
			return nil
		},
	})
	return h
}

// routeNode adds the Node's routes and logs the effective settings.
func routeNode(node *baton.Node, h *httpServer, o runOptions, log *zap.Logger) {
	logStartup(log, o, node.Config())
	h.mux.Handle("GET /healthz", node.LivenessCheck())
	h.mux.Handle("GET /readyz", node.ReadinessCheck())
	h.mux.HandleFunc("GET /status", func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.MarshalIndent(node.Status(), "", "  ")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	})
}

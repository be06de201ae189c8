package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
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
	"github.com/baton-run/baton/cmd/demo-worker/contract"
)

// meterOut is the OpenTelemetry meter provider every component reports to, and the Prometheus
// registry its exporter writes to (its own, not the global one).
type meterOut struct {
	fx.Out
	Provider metric.MeterProvider
	Registry *prometheus.Registry
}

func newMeterProvider(lc fx.Lifecycle, o runOptions) (meterOut, error) {
	return newMeters(lc, "baton-demo-worker", o.Cfg.ServerID)
}

// newMeters is the meter provider of a demo-worker process (run, load): exported with the
// OpenTelemetry Prometheus exporter to a registry of its own, beside the Go and process collectors,
// and shut down by lc. service and instance are its resource's service.name and service.instance.id.
func newMeters(lc fx.Lifecycle, service, instance string) (meterOut, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	exp, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return meterOut{}, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exp), sdkmetric.WithResource(resource.NewSchemaless(
		attribute.String("service.name", service),
		attribute.String("service.instance.id", instance),
	)))
	lc.Append(fx.StopHook(mp.Shutdown))
	return meterOut{Provider: mp, Registry: reg}, nil
}

// httpServer serves /metrics, and the Node's routes once routeNode has added them.
type httpServer struct {
	mux  *http.ServeMux
	srv  *http.Server
	log  *zap.Logger
	addr net.Addr      // where it listens, once started
	done chan struct{} // closed when Serve has returned; nil until started
}

func newHTTPServer(lc fx.Lifecycle, o runOptions, reg *prometheus.Registry, log *zap.Logger) *httpServer {
	h := newMetricsServer(o.httpAddr, reg, log.Named("http"))
	lc.Append(fx.Hook{OnStart: func(context.Context) error { return h.start() }, OnStop: h.stop})
	return h
}

// newMetricsServer is a server of reg's metrics on GET /metrics at addr, not started yet: the HTTP
// server of `demo-worker run` and of `demo-worker load -metrics-addr`.
func newMetricsServer(addr string, reg *prometheus.Registry, log *zap.Logger) *httpServer {
	mux := http.NewServeMux()
	mux.Handle("GET "+contract.PathMetrics, promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorLog: zap.NewStdLog(log)}))
	return &httpServer{mux: mux, log: log, srv: &http.Server{
		Addr:              addr,
		Handler:           mux,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       time.Minute,
		ErrorLog:          zap.NewStdLog(log),
	}}
}

// start listens here, so that a busy port fails the start, and serves in the background.
func (h *httpServer) start() error {
	ln, err := listen(h.srv.Addr)
	if err != nil {
		return fmt.Errorf("http: %w", err)
	}
	h.addr = ln.Addr()
	h.log.Info("http listening", zap.String("addr", h.addr.String()))
	h.done = make(chan struct{})
	go func() {
		defer close(h.done)
		if err := h.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			h.log.Error("http server failed", zap.Error(err))
		}
	}()
	return nil
}

// inheritedPrefix marks a listen address that names a listening socket this process inherited,
// "fd:N" (socket activation): whoever started the process bound the port and keeps no race open
// between choosing it and listening on it.
const inheritedPrefix = "fd:"

// inheritedFD parses addr's fd:N: the descriptor, and whether addr names one at all.
func inheritedFD(addr string) (fd int, inherited bool, err error) {
	n, ok := strings.CutPrefix(addr, inheritedPrefix)
	if !ok {
		return 0, false, nil
	}
	if fd, err = strconv.Atoi(n); err != nil || fd < 3 {
		return 0, true, fmt.Errorf("%q: an inherited socket is fd:N with N a file descriptor of at least 3", addr)
	}
	return fd, true, nil
}

// checkListenAddr reports whether addr is HOST:PORT or fd:N with N >= 3 (0-2 are the standard
// streams).
func checkListenAddr(addr string) error {
	if _, inherited, err := inheritedFD(addr); inherited {
		return err
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("must be HOST:PORT or fd:N: %w", err)
	}
	return nil
}

// listen listens on addr (HOST:PORT), or takes the inherited listening socket that addr names (fd:N).
func listen(addr string) (net.Listener, error) {
	fd, inherited, err := inheritedFD(addr)
	switch {
	case err != nil:
		return nil, err
	case !inherited:
		return net.Listen("tcp", addr)
	}
	f := os.NewFile(uintptr(fd), addr)
	defer f.Close() // FileListener holds its own copy
	ln, err := net.FileListener(f)
	if err != nil {
		return nil, fmt.Errorf("inherited socket %s: %w", addr, err)
	}
	return ln, nil
}

// stop shuts the server down and waits for it to stop serving, until ctx ends.
func (h *httpServer) stop(ctx context.Context) error {
	err := h.srv.Shutdown(ctx)
	if h.done != nil {
		select {
		case <-h.done:
		case <-ctx.Done():
		}
	}
	if err != nil {
		return fmt.Errorf("http shutdown: %w", err)
	}
	return nil
}

// routeNode adds the Node's routes and logs the effective settings.
func routeNode(node *baton.Node, h *httpServer, o runOptions, log *zap.Logger) {
	logStartup(log, o, node.Config())
	h.mux.Handle("GET "+contract.PathLive, node.LivenessCheck())
	h.mux.Handle("GET "+contract.PathReady, node.ReadinessCheck())
	h.mux.HandleFunc("GET "+contract.PathStatus, func(w http.ResponseWriter, _ *http.Request) {
		b, err := json.MarshalIndent(node.Status(), "", "  ")
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(append(b, '\n'))
	})
}

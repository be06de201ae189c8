package fxmodule_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.uber.org/fx"
)

// README: metrics begin

// newMeterProvider exports every Baton metric (baton_*) to Prometheus: the exporter registers with
// the default Prometheus registry, which promhttp.Handler serves.
func newMeterProvider(lc fx.Lifecycle) (*sdkmetric.MeterProvider, error) {
	exporter, err := otelprom.New()
	if err != nil {
		return nil, err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	lc.Append(fx.StopHook(mp.Shutdown))
	return mp, nil
}

// serveMetrics serves /metrics; a port in use fails the start, and Shutdown ends Serve.
func serveMetrics(lc fx.Lifecycle) {
	srv := &http.Server{Addr: ":9090", Handler: promhttp.Handler()}
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error {
			ln, err := net.Listen("tcp", srv.Addr)
			if err != nil {
				return err
			}
			go srv.Serve(ln)
			return nil
		},
		OnStop: srv.Shutdown,
	})
}

// README: metrics end

// Example_prometheus is the README's Prometheus wiring beside Baton: fxmodule takes the SDK's
// *sdkmetric.MeterProvider as it is.
func Example_prometheus() {
	_ = fx.Options(
		// fx.Supply(baton.Config{...}), fx.Provide(newEtcd, newTemporal, newRedis), fxmodule.Module,
		fx.Provide(newMeterProvider),
		fx.Invoke(serveMetrics),
	)
}

// The README shows the wiring above word for word, so that what users copy compiles.
func TestREADMEShowsThePrometheusWiring(t *testing.T) {
	src, err := os.ReadFile("prometheus_example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), "// README: metrics begin\n")
	snippet, _, _ := strings.Cut(rest, "// README: metrics end\n")
	snippet = strings.TrimSpace(snippet)
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if snippet == "" || !strings.Contains(string(readme), "```go\n"+snippet+"\n```") {
		t.Fatalf("README.md does not show the Prometheus wiring of prometheus_example_test.go:\n%s", snippet)
	}
}

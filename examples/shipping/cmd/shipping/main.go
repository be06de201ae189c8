// Command shipping runs the example application: set BATON_ETCD_ENDPOINTS, BATON_TEMPORAL_ADDRESS and
// BATON_REDIS_ADDR (see clients.LoadEnv), and optionally SHIPPING_PROJECT, SHIPPING_QUEUES
// (comma-separated), SHIPPING_REGION and SHIPPING_HTTP_ADDR.
package main

import (
	"fmt"
	"os"
	"strings"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/examples/shipping"
	"github.com/baton-run/baton/fxmodule"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "shipping:", err)
		os.Exit(1)
	}
}

func run() error {
	cc, err := clients.LoadEnv(clients.Config{})
	if err != nil {
		return err
	}
	app := fx.New(
		fx.Supply(cc),
		fx.Provide(zap.NewProduction),
		fxmodule.Clients,
		shipping.Module(shipping.Options{
			Baton: baton.Config{
				Project: env("SHIPPING_PROJECT", "shipping"),
				Queues:  strings.Split(env("SHIPPING_QUEUES", "eu,us"), ","),
			},
			Region:   env("SHIPPING_REGION", "eu-west"),
			HTTPAddr: env("SHIPPING_HTTP_ADDR", ":9090"),
		}),
	)
	app.Run()
	return app.Err()
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

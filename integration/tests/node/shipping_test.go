package node_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/worker"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/examples/shipping"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// shippingApp is the example application as its main builds it, on the test's servers.
func (e *env) shippingApp(t *testing.T, p, id string, queues ...string) (*fxtest.App, *baton.Node, *shipping.Server) {
	t.Helper()
	var node *baton.Node
	var srv *shipping.Server
	// The SDK keeps cached workflow runs (and their goroutines) process-wide after a worker stops.
	t.Cleanup(worker.PurgeStickyWorkflowCache)
	app := fxtest.New(t, fx.NopLogger,
		fx.Supply(e.cc, zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)).Named(id)),
		fxmodule.Clients,
		shipping.Module(shipping.Options{Baton: fast(p, id, queues...), Region: "eu-west", HTTPAddr: "127.0.0.1:0"}),
		fx.Populate(&node, &srv))
	return app, node, srv
}

func get(srv *shipping.Server, path string) (int, string, error) {
	resp, err := http.Get("http://" + srv.Addr() + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// The example application works as documented, on real servers: its start hook gives each dispatcher
// run its own input, the run's activity confirms its token and makes a fenced write naming the owner,
// the listener reports what the process leads, /metrics exports Baton's series, /healthz and /readyz
// answer; when the leader's app stops, the other takes every queue over and its runs announce it.
func TestShippingExample(t *testing.T) {
	e := newEnv(t)
	p := project()
	queues := []string{"eu", "us"}
	cli := etcdx.Client(t, e.etcd)
	announced := func(q string) (string, error) {
		resp, err := cli.Get(t.Context(), shipping.AnnouncementKey(p, q))
		if err != nil || len(resp.Kvs) == 0 {
			return "", fmt.Errorf("no announcement of %s (%v)", q, err)
		}
		return string(resp.Kvs[0].Value), nil
	}
	appA, nodeA, srvA := e.shippingApp(t, p, "ship-a", queues...)
	appA.RequireStart()
	eventually(t, 60*time.Second, "ship-a's runs announce it with their token and region", func() error {
		for _, q := range queues {
			qs, ok := leading(nodeA, q)
			if !ok {
				return fmt.Errorf("%s not led: %+v", q, qs)
			}
			got, err := announced(q)
			if err != nil {
				return err
			}
			if want := fmt.Sprintf("ship-a %d eu-west", qs.Token); got != want {
				return fmt.Errorf("%s: announcement %q, want %q", q, got, want)
			}
		}
		return nil
	})
	code, body, err := get(srvA, "/leading")
	var heard map[string]int64
	if err != nil || code != http.StatusOK || json.Unmarshal([]byte(body), &heard) != nil || len(heard) != len(queues) {
		t.Fatalf("/leading: %d %q %v", code, body, err)
	}
	for _, q := range queues {
		if qs, _ := leading(nodeA, q); heard[q] != qs.Token {
			t.Fatalf("/leading says %s at token %d, status says %d", q, heard[q], qs.Token)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body, err := get(srvA, path); err != nil || code != http.StatusOK {
			t.Fatalf("%s: %d %q %v", path, code, body, err)
		}
	}
	eventually(t, 30*time.Second, "/metrics exports Baton's series", func() error {
		_, body, err := get(srvA, "/metrics")
		if err != nil {
			return err
		}
		for _, series := range []string{"baton_takeover_total", "baton_queue_leader"} {
			if !strings.Contains(body, series) {
				return fmt.Errorf("no %s in /metrics", series)
			}
		}
		return nil
	})

	appB, nodeB, _ := e.shippingApp(t, p, "ship-b", queues...)
	appB.RequireStart()
	appA.RequireStop()
	eventually(t, 60*time.Second, "ship-b takes every queue over and its runs announce it", func() error {
		for _, q := range queues {
			qs, ok := leading(nodeB, q)
			if !ok {
				return fmt.Errorf("%s not led by ship-b", q)
			}
			if got, err := announced(q); err != nil || got != fmt.Sprintf("ship-b %d eu-west", qs.Token) {
				return fmt.Errorf("%s: announcement %q %v", q, got, err)
			}
		}
		return nil
	})
	appB.RequireStop()
}

package fxmodule

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/internal/testconverter"
)

// idleClients are clients that never connect (nothing here starts the Node), closed with the test.
func idleClients(t *testing.T) fx.Option {
	t.Helper()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = etcd.Close() })
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = rdb.Close() })
	return fx.Supply(etcd, fx.Annotate(tc, fx.As(new(client.Client))), fx.Annotate(rdb, fx.As(new(redis.UniversalClient))))
}

// The Node reads and writes owner memos with the converter the app provides, unless its Config
// names one of its own.
func TestNodeTakesTheAppsDataConverter(t *testing.T) {
	fromApp, fromConfig := testconverter.New(), testconverter.New()
	for _, tc := range []struct {
		name   string
		config converter.DataConverter
		app    converter.DataConverter // nil: the app provides none
		want   converter.DataConverter
	}{
		{"the app's converter fills in the Config's", nil, fromApp, fromApp},
		{"the Config's converter wins", fromConfig, fromApp, fromConfig},
		{"none: the takeover's default applies", nil, nil, converter.GetDefaultDataConverter()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := baton.Config{Project: "billing", Queues: []string{"orders"}, ServerID: "w1",
				DisableReconciler: true, DisableRegistry: true}
			cfg.Takeover.DataConverter = tc.config
			opts := []fx.Option{fx.Supply(cfg), idleClients(t), Module}
			if tc.app != nil {
				opts = append(opts, fx.Provide(func() converter.DataConverter { return tc.app }))
			}
			var node *baton.Node
			fxtest.New(t, append(opts, fx.Populate(&node))...)
			if got := node.Config().Takeover.DataConverter; got != tc.want {
				t.Fatalf("Takeover.DataConverter = %v, want %v", got, tc.want)
			}
		})
	}
}

// The Temporal client of Clients encodes with the app's converter too, so that the memos Baton writes
// and reads go through one converter.
func TestTemporalClientUsesTheAppsDataConverter(t *testing.T) {
	addr := startFrontend(t)
	dc := testconverter.New()
	lc := fxtest.NewLifecycle(t)
	tc, err := NewTemporalClient(ClientParams{Config: clients.Config{EtcdEndpoints: []string{"e:2379"}, TemporalAddress: addr},
		DataConverter: dc, Lifecycle: lc})
	if err != nil {
		t.Fatal(err)
	}
	lc.RequireStart()
	defer lc.RequireStop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// The stand-in frontend does not implement starts: the call fails after the client encoded the
	// input and the memo.
	_, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "dispatcher-billing-orders", TaskQueue: "orders",
		Memo: map[string]any{"baton.owner": "w1"}}, "baton.Dispatcher", "input")
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ExecuteWorkflow = %v, want the frontend's refusal", err)
	}
	if n := dc.Encoded(); n < 2 {
		t.Fatalf("the app's converter encoded %d payload(s), want the input and the memo", n)
	}
}

// startFrontend serves the smallest stand-in for Temporal's frontend the SDK connects to (health
// and system info); every other call is refused as unimplemented. The clients package tests what
// the client sends over TLS against a fuller one.
func startFrontend(t *testing.T) (addr string) {
	t.Helper()
	srv := grpc.NewServer()
	workflowservice.RegisterWorkflowServiceServer(srv, frontend{})
	hs := health.NewServer()
	hs.SetServingStatus(workflowservice.WorkflowService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return l.Addr().String()
}

type frontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
}

func (frontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

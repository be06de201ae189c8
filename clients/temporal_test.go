package clients

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/baton-run/baton/internal/testcerts"
)

// frontend stands in for Temporal's frontend service: a real gRPC server (TLS with client
// certificates required, or plain) that records what each call carried. A real Temporal server
// with TLS cannot run in-process here (temporaltest serves plain gRPC only), so what the client
// sends is checked at the gRPC level: the TLS handshake, the API key and the namespace.
type frontend struct {
	workflowservice.UnimplementedWorkflowServiceServer
	addr string

	mu         sync.Mutex
	auth       []string // "authorization" metadata of every call
	clientCN   string   // common name of the client certificate of the last call
	namespaces []string // namespaces of DescribeWorkflowExecution calls
}

func startFrontend(t *testing.T, tlsCfg *tls.Config) *frontend {
	t.Helper()
	f := &frontend{}
	var opts []grpc.ServerOption
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	opts = append(opts, grpc.UnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		f.mu.Lock()
		f.auth = append(f.auth, strings.Join(md.Get("authorization"), ","))
		if p, ok := peer.FromContext(ctx); ok {
			if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
				f.clientCN = info.State.PeerCertificates[0].Subject.CommonName
			}
		}
		f.mu.Unlock()
		return h(ctx, req)
	}))
	srv := grpc.NewServer(opts...)
	workflowservice.RegisterWorkflowServiceServer(srv, f)
	hs := health.NewServer() // the SDK checks the frontend's health when it connects
	hs.SetServingStatus(workflowservice.WorkflowService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = l.Addr().String()
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(l) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	return f
}

func (f *frontend) GetSystemInfo(context.Context, *workflowservice.GetSystemInfoRequest) (*workflowservice.GetSystemInfoResponse, error) {
	return &workflowservice.GetSystemInfoResponse{}, nil
}

func (f *frontend) DescribeWorkflowExecution(_ context.Context, req *workflowservice.DescribeWorkflowExecutionRequest) (*workflowservice.DescribeWorkflowExecutionResponse, error) {
	f.mu.Lock()
	f.namespaces = append(f.namespaces, req.GetNamespace())
	f.mu.Unlock()
	return nil, serviceerror.ToStatus(serviceerror.NewNotFound("no such workflow")).Err()
}

// call makes one Temporal call through a client from NewTemporal and returns what the
// frontend recorded.
func (f *frontend) call(t *testing.T, cfg Config) (auth []string, cn string, namespaces []string) {
	t.Helper()
	cfg.TemporalAddress = f.addr
	tc, err := NewTemporal(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err = tc.DescribeWorkflowExecution(ctx, "dispatcher-p-q", "")
	var notFound *serviceerror.NotFound
	if !errors.As(err, &notFound) {
		f.mu.Lock()
		defer f.mu.Unlock()
		t.Fatalf("DescribeWorkflowExecution = %v, want the frontend's NotFound (frontend saw %d calls)", err, len(f.auth))
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.auth...), f.clientCN, append([]string(nil), f.namespaces...)
}

// NewTemporal dials with mutual TLS from the configured files, sends the API key as a bearer
// token on every call, and addresses the configured namespace.
func TestTemporalClientTLSAndAPIKey(t *testing.T) {
	dir := t.TempDir()
	ca, err := testcerts.NewCA(dir, "temporal")
	if err != nil {
		t.Fatal(err)
	}
	server, err := ca.Server("temporal-frontend")
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Client("temporal-client", "baton-worker")
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := tls.LoadX509KeyPair(server.CertFile, server.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	f := startFrontend(t, &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.Pool(),
		ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12})
	cfg := Config{EtcdEndpoints: []string{"e:2379"}, TemporalNamespace: "billing-prod", TemporalAPIKey: "key-Qm41",
		TemporalTLS: TLSFiles{CAFile: ca.CertFile, CertFile: client.CertFile, KeyFile: client.KeyFile, ServerName: "localhost"}}
	auth, cn, namespaces := f.call(t, cfg)
	if cn != "baton-worker" {
		t.Fatalf("client certificate CN = %q, want baton-worker (mTLS from the files)", cn)
	}
	if len(auth) < 2 {
		t.Fatalf("frontend saw %d calls", len(auth))
	}
	for _, a := range auth {
		if a != "Bearer key-Qm41" {
			t.Fatalf("authorization = %q on a call, want the API key as bearer token on every call", a)
		}
	}
	if len(namespaces) != 1 || namespaces[0] != "billing-prod" {
		t.Fatalf("namespaces = %v, want [billing-prod]", namespaces)
	}

	// Without the client certificate the frontend refuses the handshake.
	noCert := cfg
	noCert.TemporalTLS.CertFile, noCert.TemporalTLS.KeyFile = "", ""
	opts, err := TemporalOptions(noCert, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := opts.ConnectionOptions.TLS; got == nil || got.RootCAs == nil || len(got.Certificates) != 0 || got.ServerName != "localhost" {
		t.Fatalf("TLS options without a certificate: %+v", got)
	}
}

// With TemporalTLSDisabled the API key goes over a plain connection (a TLS-terminating sidecar);
// without it an API key alone turns TLS on with the system roots.
func TestTemporalAPIKeyTLSChoice(t *testing.T) {
	f := startFrontend(t, nil)
	cfg := Config{EtcdEndpoints: []string{"e:2379"}, TemporalAPIKey: "key-Zr07", TemporalTLSDisabled: true}
	auth, _, namespaces := f.call(t, cfg)
	if auth[len(auth)-1] != "Bearer key-Zr07" || namespaces[0] != "default" {
		t.Fatalf("plain connection: authorization %v, namespaces %v", auth, namespaces)
	}

	cfg.TemporalTLSDisabled = false
	opts, err := TemporalOptions(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tls := opts.ConnectionOptions.TLS; tls == nil || tls.MinVersion != 0x0303 || tls.RootCAs != nil || opts.ConnectionOptions.TLSDisabled {
		t.Fatalf("an API key without TLS settings must turn TLS on with the system roots: %+v", opts.ConnectionOptions)
	}
	if opts.Credentials == nil || opts.Namespace != "default" || opts.HostPort != "localhost:7233" {
		t.Fatalf("options %+v", opts)
	}
	if opts, _ := TemporalOptions(Config{EtcdEndpoints: []string{"e:2379"}}, nil); opts.ConnectionOptions.TLS != nil || opts.Credentials != nil {
		t.Fatalf("no API key, no TLS settings: plain, without credentials: %+v", opts.ConnectionOptions)
	}
}

// The task polls, the task completions and the updates wait for a ready connection; the calls
// that tell Baton whether the server is there (describe, start, terminate, the health check) fail
// fast.
func TestCallsThatWaitForReady(t *testing.T) {
	for method, want := range map[string]bool{
		workflowservice.WorkflowService_PollWorkflowTaskQueue_FullMethodName:        true,
		workflowservice.WorkflowService_PollActivityTaskQueue_FullMethodName:        true,
		workflowservice.WorkflowService_PollNexusTaskQueue_FullMethodName:           true,
		workflowservice.WorkflowService_RespondWorkflowTaskCompleted_FullMethodName: true,
		workflowservice.WorkflowService_RespondActivityTaskCompleted_FullMethodName: true,
		workflowservice.WorkflowService_RespondActivityTaskFailed_FullMethodName:    true,
		workflowservice.WorkflowService_UpdateWorkflowExecution_FullMethodName:      true,
		workflowservice.WorkflowService_PollWorkflowExecutionUpdate_FullMethodName:  true,
		workflowservice.WorkflowService_DescribeWorkflowExecution_FullMethodName:    false,
		workflowservice.WorkflowService_StartWorkflowExecution_FullMethodName:       false,
		workflowservice.WorkflowService_TerminateWorkflowExecution_FullMethodName:   false,
		workflowservice.WorkflowService_GetWorkflowExecutionHistory_FullMethodName:  false,
		workflowservice.WorkflowService_SignalWorkflowExecution_FullMethodName:      false,
		workflowservice.WorkflowService_RecordActivityTaskHeartbeat_FullMethodName:  false,
		workflowservice.WorkflowService_ListWorkflowExecutions_FullMethodName:       false,
		workflowservice.WorkflowService_GetSystemInfo_FullMethodName:                false,
		"/grpc.health.v1.Health/Check":                                              false,
	} {
		if got := waitsForReady(method); got != want {
			t.Errorf("waitsForReady(%s) = %v, want %v", method, got, want)
		}
	}
	if n := len(TemporalDialOptions()); n != 2 {
		t.Errorf("%d dial options, want the reconnect backoff and the waiting calls' interceptor", n)
	}
}

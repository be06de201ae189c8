package clients

import (
	"context"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
)

// Reconnect backoff of the Temporal client's connection (TemporalDialOptions).
const (
	TemporalReconnectBaseDelay = 100 * time.Millisecond
	TemporalReconnectMaxDelay  = time.Second
)

// TemporalDialOptions are the gRPC dial options NewTemporal adds to the SDK's, so that a
// Temporal server that restarts is served again within about a second of being back, not tens of
// seconds later. An application that makes its own client.Client for Baton's workers and Producers
// adds them to client.Options.ConnectionOptions.DialOptions.
//
//   - The connection's reconnect backoff is capped at TemporalReconnectMaxDelay (the SDK caps it at
//     10 s: a restart of a few seconds left the connection waiting up to that long after the server
//     was back).
//   - Task polls wait for the connection to be ready instead of failing at once while it is down:
//     every failed poll grows the SDK's poller backoff (up to 10 s), which the pollers then sleep
//     through after the server is back, while the requests their runs accepted wait.
//
// Other calls still fail fast and are retried by their callers with their own bounds.
func TemporalDialOptions() []grpc.DialOption {
	cp := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	cp.Backoff.BaseDelay, cp.Backoff.MaxDelay = TemporalReconnectBaseDelay, TemporalReconnectMaxDelay
	return []grpc.DialOption{grpc.WithConnectParams(cp), grpc.WithChainUnaryInterceptor(pollsWaitForReady)}
}

// pollsWaitForReady makes the task polls of Temporal's WorkflowService wait for a ready connection.
func pollsWaitForReady(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if isTaskPoll(method) {
		opts = append(opts, grpc.WaitForReady(true))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// isTaskPoll recognises the full gRPC method names of the task polls.
func isTaskPoll(method string) bool {
	switch method {
	case workflowservice.WorkflowService_PollWorkflowTaskQueue_FullMethodName,
		workflowservice.WorkflowService_PollActivityTaskQueue_FullMethodName,
		workflowservice.WorkflowService_PollNexusTaskQueue_FullMethodName:
		return true
	}
	return false
}

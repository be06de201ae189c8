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
	// TemporalReconnectMaxDelay is how late, at most (plus gRPC's 20% jitter), a connection notices
	// that its server is back. With a cap of a second, a Producer's connection still refused calls
	// 0.6 s after a restarted server was serving the workers beside it (bench, Temporal restart
	// under load). While the server stays down, a client tries to connect four times a second: one
	// TCP connect each, bounded by MinConnectTimeout.
	TemporalReconnectMaxDelay = 250 * time.Millisecond
)

// TemporalDialOptions are the gRPC dial options NewTemporal adds to the SDK's, so that the workers
// and Producers of a Temporal server that restarts are served again as soon as it is back, not
// seconds later. An application that makes its own client.Client for Baton's workers and Producers
// adds them to client.Options.ConnectionOptions.DialOptions.
//
//   - The connection's reconnect backoff is capped at TemporalReconnectMaxDelay (the SDK caps it at
//     10 s: a restart of a few seconds left the connection waiting up to that long after the server
//     was back).
//   - The task polls, the workers' task completions and the updates (Producer.Dispatch, the
//     takeover's quiesce) wait for the connection to be ready instead of failing at once while it
//     is down, so each is sent the moment the server is back; its caller's deadline still bounds
//     it. The other calls fail fast: the takeover, supervision, readiness and reach checks must
//     learn that the server is down, not wait for it.
func TemporalDialOptions() []grpc.DialOption {
	cp := grpc.ConnectParams{Backoff: backoff.DefaultConfig, MinConnectTimeout: 5 * time.Second}
	cp.Backoff.BaseDelay, cp.Backoff.MaxDelay = TemporalReconnectBaseDelay, TemporalReconnectMaxDelay
	return []grpc.DialOption{grpc.WithConnectParams(cp), grpc.WithChainUnaryInterceptor(waitForReady)}
}

// waitForReady makes the calls waitsForReady names wait for a ready connection.
func waitForReady(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	if waitsForReady(method) {
		opts = append(opts, grpc.WaitForReady(true))
	}
	return invoker(ctx, method, req, reply, cc, opts...)
}

// waitsForReady says whether the WorkflowService call method (its full gRPC name) waits for a
// ready connection while the server is down. Each of these is retried by its caller anyway, and
// each pause between its attempts may be time after the server is back:
//
//   - The task polls: every failed poll grows the SDK's poller backoff (up to 10 s), which the
//     pollers then sleep through after the server is back, while the requests their runs accepted
//     wait.
//   - The workers' task completions: the SDK retries one for 10 s, with pauses of 0.4, 0.8, 1.6,
//     3.2 and 6 s (20% jitter). An activity completion refused during a restart of 3 s was sent
//     0.6 s after the server was back (bench); one still refused at its fifth attempt (at most
//     7.2 s after the first) is given up, and its activity runs again only after its
//     StartToCloseTimeout (30 s for the dispatcher's): after an outage of 7.5 s a Dispatch returned
//     22 s after the server was back (integration test). A workflow task's completion is given up
//     the same way, and the task waits for its timeout.
//   - The updates and their polls (Producer.Dispatch, the takeover's quiesce): within each attempt
//     the SDK retried a refused call with pauses up to a tenth of the attempt's deadline (0.5 s for
//     a Producer's), on top of the reconnect backoff.
func waitsForReady(method string) bool {
	switch method {
	case workflowservice.WorkflowService_PollWorkflowTaskQueue_FullMethodName,
		workflowservice.WorkflowService_PollActivityTaskQueue_FullMethodName,
		workflowservice.WorkflowService_PollNexusTaskQueue_FullMethodName,
		workflowservice.WorkflowService_RespondWorkflowTaskCompleted_FullMethodName,
		workflowservice.WorkflowService_RespondWorkflowTaskFailed_FullMethodName,
		workflowservice.WorkflowService_RespondQueryTaskCompleted_FullMethodName,
		workflowservice.WorkflowService_RespondActivityTaskCompleted_FullMethodName,
		workflowservice.WorkflowService_RespondActivityTaskFailed_FullMethodName,
		workflowservice.WorkflowService_RespondActivityTaskCanceled_FullMethodName,
		workflowservice.WorkflowService_RespondNexusTaskCompleted_FullMethodName,
		workflowservice.WorkflowService_RespondNexusTaskFailed_FullMethodName,
		workflowservice.WorkflowService_UpdateWorkflowExecution_FullMethodName,
		workflowservice.WorkflowService_PollWorkflowExecutionUpdate_FullMethodName:
		return true
	}
	return false
}

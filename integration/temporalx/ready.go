package temporalx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/baton-run/baton/integration/testkit"
)

// waitReady waits until the frontend answers and the namespace is usable, registering it on an
// external server where it does not exist yet; exited (nil for an external server) ends the wait.
func (s *Server) waitReady(ctx context.Context, exited <-chan struct{}) error {
	err := testkit.Poll(ctx, 0, 100*time.Millisecond, func() error {
		select {
		case <-exited:
			return testkit.Final(errExited)
		default:
			return s.tryNamespace(ctx)
		}
	})
	switch {
	case errors.Is(err, errExited) && s.opts.LogFile != "":
		b, _ := os.ReadFile(s.opts.LogFile)
		return fmt.Errorf("%w (log %s: %s)", err, s.opts.LogFile, testkit.Tail(string(b), 1500))
	case err != nil && !errors.Is(err, errExited):
		return fmt.Errorf("temporalx: namespace %q on %s not ready in time: %w", s.namespace, s.hostPort, err)
	}
	return err
}

func (s *Server) tryNamespace(ctx context.Context) error {
	nc, err := client.NewNamespaceClient(s.clientOptions())
	if err != nil {
		return err
	}
	defer nc.Close()
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	defer rcancel()
	_, err = nc.Describe(rctx, s.namespace)
	var notFound *serviceerror.NamespaceNotFound
	if errors.As(err, &notFound) {
		err = nc.Register(rctx, &workflowservice.RegisterNamespaceRequest{
			Namespace:                        s.namespace,
			WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
		})
		var exists *serviceerror.NamespaceAlreadyExists
		if errors.As(err, &exists) {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	// Describe and Register go straight to persistence; every service's
	// namespace registry then reads the namespace through on a cache miss,
	// except that a miss is remembered for 1s (readthroughCacheTTL) by a
	// registry that has looked the name up before. Probe until the frontend
	// (its registry) and history (its own registry) both know the namespace:
	// a describe of a workflow that does not exist then fails with NotFound,
	// not NamespaceNotFound.
	c, err := client.Dial(s.clientOptions())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.WorkflowService().DescribeWorkflowExecution(rctx, &workflowservice.DescribeWorkflowExecutionRequest{
		Namespace: s.namespace,
		Execution: &commonpb.WorkflowExecution{WorkflowId: "temporalx-namespace-probe"},
	})
	if errors.As(err, new(*serviceerror.NotFound)) {
		return nil
	}
	return err
}

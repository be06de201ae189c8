package opscli

import (
	"context"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// listRuns pages through the runs visibility lists for query, newest first, up to max, and calls
// each with every run; each page waits for wait (nil: no pacing) and is bounded by timeout. It stops
// at the first error, of a call or of each.
func listRuns(ctx context.Context, tc client.Client, query string, max int, timeout time.Duration,
	wait func(context.Context) error, each func(*workflowpb.WorkflowExecutionInfo) error) error {
	var page []byte
	for seen := 0; seen < max; {
		if wait != nil {
			if err := wait(ctx); err != nil {
				return err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		resp, err := tc.ListWorkflow(cctx, &workflowservice.ListWorkflowExecutionsRequest{
			PageSize: int32(min(max-seen, 1000)), NextPageToken: page, Query: query})
		cancel()
		if err != nil {
			return err
		}
		for _, info := range resp.GetExecutions() {
			seen++
			if err := each(info); err != nil {
				return err
			}
		}
		if page = resp.GetNextPageToken(); len(page) == 0 {
			return nil
		}
	}
	return nil
}

package temporalmodel

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
)

// StartRequest is a start as it reaches the service: what the SDK sends for ExecuteWorkflow and
// SignalWithStartWorkflow.
type StartRequest struct {
	WorkflowID   string
	RequestID    string
	WorkflowType string
	TaskQueue    string
	Memo         *commonpb.Memo
	Reuse        enumspb.WorkflowIdReusePolicy
	Conflict     enumspb.WorkflowIdConflictPolicy
	// Signal makes it a signal-with-start: an open run is signalled (the server allows only the
	// USE_EXISTING conflict policy there), a new one started otherwise.
	Signal string
}

// StartResponse is the service's answer to a start.
type StartResponse struct {
	RunID string
	// Started is false when the answer names a run that was already there (USE_EXISTING, a
	// signal); a retry of the request that started the current run answers true, as the first time.
	Started bool
}

// Start applies a start request.
func (m *Model) Start(req StartRequest) (StartResponse, error) {
	if req.WorkflowID == "" {
		return StartResponse{}, serviceerror.NewInvalidArgument("WorkflowId is not set on request.")
	}
	if req.Signal != "" && req.Conflict != enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED &&
		req.Conflict != enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING {
		return StartResponse{}, serviceerror.NewInvalidArgument(
			"SignalWithStartWorkflowExecution only supports WorkflowIdConflictPolicy UseExisting")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.latest(req.WorkflowID)
	if cur != nil && req.RequestID != "" && cur.RequestID == req.RequestID {
		// A retry (or a duplicate delivery) of the request that started the current run, open or
		// closed: the server answers as it did the first time (Started, the same run).
		return StartResponse{RunID: cur.RunID, Started: true}, nil
	}
	if cur != nil && cur.Open() {
		switch {
		case req.Signal != "" || req.Conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING:
			return StartResponse{RunID: cur.RunID}, nil
		case req.Conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING ||
			req.Reuse == enumspb.WORKFLOW_ID_REUSE_POLICY_TERMINATE_IF_RUNNING:
			m.close(cur, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "terminated by new start", "")
		default:
			return StartResponse{}, alreadyStarted(cur, "Workflow execution is already running. WorkflowId: %v, RunId: %v.")
		}
	} else if cur != nil {
		if err := reuseRefused(cur, req.Reuse); err != nil {
			return StartResponse{}, err
		}
	}
	r := m.add(req.WorkflowID, "", req.RequestID, req.WorkflowType, req.TaskQueue, req.Memo)
	return StartResponse{RunID: r.RunID, Started: true}, nil
}

// reuseRefused applies the reuse policy to the latest run, closed.
func reuseRefused(cur *Run, reuse enumspb.WorkflowIdReusePolicy) error {
	switch reuse {
	case enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE:
		return alreadyStarted(cur, "Workflow execution already finished and WorkflowIdReusePolicy is RejectDuplicate. WorkflowId: %v, RunId: %v.")
	case enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE_FAILED_ONLY:
		switch cur.Status {
		case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
			return alreadyStarted(cur, "Workflow execution already finished successfully. WorkflowId: %v, RunId: %v. Workflow Id reuse policy: allow duplicate workflow Id if last run failed.")
		}
	}
	return nil
}

func alreadyStarted(cur *Run, format string) error {
	return serviceerror.NewWorkflowExecutionAlreadyStarted(fmt.Sprintf(format, cur.WorkflowID, cur.RunID), cur.RequestID, cur.RunID)
}

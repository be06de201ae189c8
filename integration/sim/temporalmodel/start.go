package temporalmodel

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
)

// reuseTerminateIfRunning is deprecated, and the server still honours it (without a conflict
// policy) and refuses it (with one): so does the model.
//
//lint:ignore SA1019 the model answers for a deprecated policy as the server does
const reuseTerminateIfRunning = enumspb.WORKFLOW_ID_REUSE_POLICY_TERMINATE_IF_RUNNING

// StartRequest is a start as it reaches the service: what the SDK sends for ExecuteWorkflow and
// SignalWithStartWorkflow.
type StartRequest struct {
	WorkflowID   string
	RequestID    string
	WorkflowType string
	TaskQueue    string
	Memo         *commonpb.Memo
	// Input is the workflow's input, as the started event carries it.
	Input    *commonpb.Payloads
	Reuse    enumspb.WorkflowIdReusePolicy
	Conflict enumspb.WorkflowIdConflictPolicy
	// Signal makes it a signal-with-start: an open run is signalled (conflict policy USE_EXISTING,
	// the default there; FAIL is refused; TERMINATE_EXISTING ends it and starts a new one), a new
	// run started otherwise. Its request ID dedupes the signal, never the start.
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
	if err := policiesRefused(req.Reuse, req.Conflict); err != nil {
		return StartResponse{}, err
	}
	if req.Signal != "" {
		return m.signalWithStart(req)
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
		case req.Conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING:
			return StartResponse{RunID: cur.RunID}, nil
		case req.Conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING ||
			req.Reuse == reuseTerminateIfRunning:
			m.close(cur, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "terminated by new start", "")
		default:
			return StartResponse{}, alreadyStarted(cur, "Workflow execution is already running. WorkflowId: %v, RunId: %v.")
		}
	} else if cur != nil {
		if err := reuseRefused(cur, req.Reuse); err != nil {
			return StartResponse{}, err
		}
	}
	r := m.add(req.WorkflowID, "", req.RequestID, req.WorkflowType, req.TaskQueue, req.Memo, req.Input, "")
	return StartResponse{RunID: r.RunID, Started: true}, nil
}

// policiesRefused is the frontend's check of the two policies together (the server's
// RequestValidator.ValidateWorkflowIDReusePolicy): a pair that contradicts itself is InvalidArgument.
func policiesRefused(reuse enumspb.WorkflowIdReusePolicy, conflict enumspb.WorkflowIdConflictPolicy) error {
	if conflict != enumspb.WORKFLOW_ID_CONFLICT_POLICY_UNSPECIFIED && reuse == reuseTerminateIfRunning {
		return serviceerror.NewInvalidArgument("Invalid WorkflowIDReusePolicy: WORKFLOW_ID_REUSE_POLICY_TERMINATE_IF_RUNNING cannot be used together with a WorkflowIDConflictPolicy")
	}
	if conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING && reuse == enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE {
		return serviceerror.NewInvalidArgument("Invalid WorkflowIDReusePolicy: WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE cannot be used together with WorkflowIdConflictPolicy WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING")
	}
	return nil
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

// signalWithStart applies a signal-with-start, as the history service's signalwithstartworkflow
// does: an open run is signalled and named (Started false) unless the policy is TERMINATE_EXISTING;
// otherwise the reuse policy decides on a new run. The request ID dedupes the signal, so a retry
// reaching a closed run starts another one.
func (m *Model) signalWithStart(req StartRequest) (StartResponse, error) {
	if req.Conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL {
		return StartResponse{}, serviceerror.NewInvalidArgument("SignalWithStartWorkflowExecution does not support WorkflowIdConflictPolicy FAIL")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cur := m.latest(req.WorkflowID)
	switch {
	case cur != nil && cur.Open() && req.Conflict == enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING:
		m.close(cur, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, "terminated by new start", "")
	case cur != nil && cur.Open():
		cur.Signals++
		return StartResponse{RunID: cur.RunID}, nil
	case cur != nil:
		if err := reuseRefused(cur, req.Reuse); err != nil {
			return StartResponse{}, err
		}
	}
	r := m.add(req.WorkflowID, "", req.RequestID, req.WorkflowType, req.TaskQueue, req.Memo, req.Input, "")
	r.Signals = 1
	return StartResponse{RunID: r.RunID, Started: true}, nil
}

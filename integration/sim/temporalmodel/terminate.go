package temporalmodel

import (
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
)

// The service's NotFound answers, as Temporal's history service words them (consts in
// service/history/consts): the conformance test compares types, and these texts for a reader.
const (
	msgCompleted = "workflow execution already completed"
	msgNotFound  = "workflow execution not found"
)

// TerminateRequest is a terminate as it reaches the service.
type TerminateRequest struct {
	WorkflowID string
	// RunID names the run; "" means the current run. Ignored when FirstRunID is set.
	RunID string
	// FirstRunID names a chain: the current run is terminated only if it belongs to it.
	FirstRunID string
	Reason     string
}

// Terminate applies a terminate request, in the order of the server's checks: the run must exist,
// be open, and (with FirstRunID) belong to the chain.
func (m *Model) Terminate(req TerminateRequest) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	runID := req.RunID
	if req.FirstRunID != "" || m.opts.TerminateIgnoresRunID {
		runID = ""
	}
	r := m.find(req.WorkflowID, runID)
	if r == nil {
		return serviceerror.NewNotFound(msgNotFound)
	}
	if !r.Open() {
		return serviceerror.NewNotFound(msgCompleted)
	}
	if req.FirstRunID != "" && r.FirstRunID != req.FirstRunID {
		return serviceerror.NewNotFound(msgNotFound)
	}
	m.close(r, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, req.Reason, "")
	return nil
}

package temporalmodel

import (
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
)

// Close ends id's open run out of band, as an operator's terminate or cancel, or a workflow that
// completes, fails or times out would. It reports the run it closed ("" when none was open).
func (m *Model) Close(id string, status enumspb.WorkflowExecutionStatus, reason string) (string, error) {
	switch status {
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED,
		enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED,
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
	default:
		return "", fmt.Errorf("temporalmodel: close %s: status %v is not a close (continue-as-new is ContinueAsNew)", id, status)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.latest(id)
	if r == nil || !r.Open() {
		return "", nil
	}
	m.close(r, status, reason, "")
	return r.RunID, nil
}

// ContinueAsNew makes id's open run continue as new: it closes CONTINUED_AS_NEW and a new run of the
// same chain (same FirstRunID, same memo, as the SDK carries it) starts. It reports the new run ("" when
// none was open).
func (m *Model) ContinueAsNew(id string) string { return m.ContinueAsNewWith(id, nil) }

// ContinueAsNewWith is ContinueAsNew whose new run starts with input (the workflow's
// ContinueAsNewError arguments).
func (m *Model) ContinueAsNewWith(id string, input *commonpb.Payloads) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := m.latest(id)
	if r == nil || !r.Open() {
		return ""
	}
	next := m.add(id, r.FirstRunID, "", r.WorkflowType, r.TaskQueue, r.Memo, input, r.RunID)
	// add appended next after r: r is closed pointing at it.
	m.close(r, enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW, "", next.RunID)
	return next.RunID
}

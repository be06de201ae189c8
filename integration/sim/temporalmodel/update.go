package temporalmodel

import (
	"go.temporal.io/api/serviceerror"
)

// UpdateRequest is a workflow Update as it reaches the service.
type UpdateRequest struct {
	WorkflowID string
	RunID      string
	FirstRunID string
	Name       string
	UpdateID   string
}

// Update applies a workflow Update: the current run (of the chain, with FirstRunID) completes it at
// once, as a dispatcher with no work in flight completes the quiesce. It returns the run that did.
func (m *Model) Update(req UpdateRequest) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	runID := req.RunID
	if req.FirstRunID != "" {
		runID = ""
	}
	r := m.find(req.WorkflowID, runID)
	if r == nil || (req.FirstRunID != "" && r.FirstRunID != req.FirstRunID) {
		return "", serviceerror.NewNotFound(msgNotFound)
	}
	if !r.Open() {
		return "", serviceerror.NewNotFound(msgCompleted)
	}
	return r.RunID, nil
}

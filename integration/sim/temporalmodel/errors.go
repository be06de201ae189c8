package temporalmodel

import (
	"errors"

	"go.temporal.io/api/serviceerror"
)

// AsAlreadyStarted returns err's WorkflowExecutionAlreadyStarted, or nil.
func AsAlreadyStarted(err error) *serviceerror.WorkflowExecutionAlreadyStarted {
	var already *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &already) {
		return already
	}
	return nil
}

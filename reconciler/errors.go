package reconciler

import "errors"

// Errors returned by this package; match them with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
	ErrInvalidConfig = errors.New("reconciler: invalid config")
	// ErrNotLeader means the reconciler's term ended during a cycle: the rest of the cycle was skipped.
	ErrNotLeader = errors.New("reconciler: not leader")
)

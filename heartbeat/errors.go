package heartbeat

import "errors"

// Errors returned by this package; match them with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
	ErrInvalidConfig = errors.New("heartbeat: invalid config")
	// ErrMalformed wraps an entry that cannot be decoded; the message names the key and the field.
	ErrMalformed = errors.New("heartbeat: malformed entry")
	// ErrSuperseded is returned when the entry already carries a higher fencing token: a newer owner
	// exists, and nothing was written.
	ErrSuperseded = errors.New("heartbeat: superseded by a higher fencing token")
	// ErrNotLeader is returned when the term no longer holds: nothing was written.
	ErrNotLeader = errors.New("heartbeat: term no longer holds")
)

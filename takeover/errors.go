package takeover

import "errors"

// Errors returned by this package; match them with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
	ErrInvalidConfig = errors.New("takeover: invalid config")
	// ErrInvalidName wraps an invalid project or queue name; the message names the field and the rule.
	ErrInvalidName = errors.New("takeover: invalid name")
	// ErrSuperseded means the term no longer holds (or a newer owner's run is already open): nothing
	// was terminated or started.
	ErrSuperseded = errors.New("takeover: superseded")
	// ErrFailed means the takeover gave up after its bounded attempts; the last error is wrapped.
	ErrFailed = errors.New("takeover: failed")
)

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
	// ErrPermanent marks a failure that retrying cannot fix (namespace not found, permission denied,
	// invalid argument, an owner memo that cannot be read): the takeover stops at once, and a Node
	// reports it in readiness until a takeover succeeds.
	ErrPermanent = errors.New("takeover: permanent failure")
	// ErrUnreadableOwner means a run's owner memo is there but cannot be decoded with
	// Config.DataConverter (for example the application encrypts payloads with a codec). Baton does
	// not guess a token: it wraps ErrPermanent too.
	ErrUnreadableOwner = errors.New("takeover: unreadable owner memo")
	// ErrRunClosed is returned by Watch when the supervised run closed without continuing as new; the
	// error is a *ClosedError that says how.
	ErrRunClosed = errors.New("takeover: dispatcher run closed")
)

package ledger

import "errors"

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrInvalidConfig wraps every rejected Config; the error is a *configerr.Error naming the field
	// and the rule.
	ErrInvalidConfig = errors.New("ledger: invalid config")
	// ErrInvalidOwner wraps an Owner that cannot be fenced (no election key, no token); the message
	// names the field and the rule. Nothing is written for such an owner.
	ErrInvalidOwner = errors.New("ledger: invalid owner")
	// ErrSuperseded means the owner's term no longer holds: its election key is gone or was created
	// again at another revision, or a newer owner holds the dispatch key's ledger record. Nothing was
	// written; the successor's run does the work.
	ErrSuperseded = errors.New("ledger: owner superseded")
	// ErrBadRecord wraps a ledger record that is not in the documented format. The ledger refuses to
	// guess whether such a key was dispatched.
	ErrBadRecord = errors.New("ledger: unreadable record")
	// ErrAttemptInFlight means another attempt at the dispatch key is still running its handler (or its
	// process has not been gone for AttemptTTL yet): the key is not begun beside it, so a handler never
	// runs concurrently with itself. Etcd.BeginHolding (the Dispatch activity's) waits for that attempt
	// to end and returns it only when its context ended first; Begin returns it at once, for its caller
	// to retry.
	ErrAttemptInFlight = errors.New("ledger: another attempt is handling the dispatch key")
	// ErrUnavailable is Etcd.Check's failure: the ledger's writes have been failing for a while, so no
	// dispatch completes on this worker. The message names the prefix and the last error.
	ErrUnavailable = errors.New("ledger: unavailable")
)

package dispatcher

import "errors"

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrInvalidRequest wraps every rejected dispatch request; the message names the field and the rule.
	ErrInvalidRequest = errors.New("dispatcher: invalid request")
	// ErrInvalidOwner wraps an Owner that cannot be fenced (no election key, no token); the message
	// names the field and the rule. Nothing is written for such an owner.
	ErrInvalidOwner = errors.New("dispatcher: invalid owner")
	// ErrSuperseded means the owner's term no longer holds: its election key is gone or was created
	// again at another revision, or a newer owner holds the dispatch key's ledger record. Nothing was
	// written; the successor's run does the work.
	ErrSuperseded = errors.New("dispatcher: owner superseded")
	// ErrBadRecord wraps a ledger record that is not in the documented format. The ledger refuses to
	// guess whether such a key was dispatched.
	ErrBadRecord = errors.New("dispatcher: unreadable ledger record")
	// ErrAttemptInFlight means another attempt at the dispatch key is still running its handler (or its
	// process has not been gone for LedgerAttemptTTL yet): the key is not begun beside it, so a
	// handler never runs concurrently with itself. EtcdLedger.BeginHolding (the Dispatch activity's)
	// waits for that attempt to end and returns it only when its context ended first; Begin returns it
	// at once, for its caller to retry.
	ErrAttemptInFlight = errors.New("dispatcher: another attempt is handling the dispatch key")
	// ErrLedgerUnavailable is EtcdLedger.Check's failure: the ledger's writes have been failing for a
	// while, so no dispatch completes on this worker. The message names the prefix and the last error.
	ErrLedgerUnavailable = errors.New("dispatcher: ledger unavailable")
	// ErrPermanent wraps a Temporal refusal of a Producer's call that retrying cannot fix (invalid
	// argument, namespace not found, permission denied).
	ErrPermanent = errors.New("dispatcher: permanent failure")
)

// Types of the Dispatch activity's non-retryable failures, as temporal.ApplicationError.Type()
// reports them. Each one is an error retrying cannot fix.
const (
	ErrTypeInvalidRequest = "baton.InvalidRequest"  // ErrInvalidRequest
	ErrTypeInvalidOwner   = "baton.InvalidOwner"    // ErrInvalidOwner
	ErrTypeSuperseded     = "baton.Superseded"      // ErrSuperseded
	ErrTypeBadRecord      = "baton.BadLedgerRecord" // ErrBadRecord
	// ErrTypeInvalidOptions fails a Serve run whose ServeOptions.Tuning breaks a rule; the message
	// names the field.
	ErrTypeInvalidOptions = "baton.InvalidServeOptions"
)

// Types of the failures an UpdateDispatch update ends with besides the ones above. A Producer sends
// the request again for both.
const (
	// ErrTypeContinuing rejects an update while the run prepares to continue as new; the next run of
	// the chain takes it.
	ErrTypeContinuing = "baton.ContinuingAsNew"
	// ErrTypeHandingOver rejects an update while the run's owner steps down (takeover.UpdateQuiesce);
	// the successor's run takes it.
	ErrTypeHandingOver = "baton.HandingOver"
	// ErrTypeDispatchFailed is a dispatch that failed in this run for a reason without a type of its
	// own (a cancelled run, say).
	ErrTypeDispatchFailed = "baton.DispatchFailed"
)

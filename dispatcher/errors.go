package dispatcher

import "errors"

// Errors returned by this package. Match them with errors.Is.
var (
	// ErrInvalidRequest wraps every rejected dispatch request; the message names the field and the rule.
	ErrInvalidRequest = errors.New("dispatcher: invalid request")
	// ErrPermanent wraps a Temporal refusal of a Producer's call that retrying cannot fix (invalid
	// argument, namespace not found, permission denied).
	ErrPermanent = errors.New("dispatcher: permanent failure")
)

// Types of the Dispatch activity's non-retryable failures, as temporal.ApplicationError.Type()
// reports them. Each one is an error retrying cannot fix.
const (
	ErrTypeInvalidRequest = "baton.InvalidRequest"  // ErrInvalidRequest
	ErrTypeInvalidOwner   = "baton.InvalidOwner"    // ledger.ErrInvalidOwner
	ErrTypeSuperseded     = "baton.Superseded"      // ledger.ErrSuperseded
	ErrTypeBadRecord      = "baton.BadLedgerRecord" // ledger.ErrBadRecord
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

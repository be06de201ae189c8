package election

import (
	"errors"
	"fmt"
)

// Errors returned by this package, and the causes a Term's context is cancelled with
// (context.Cause(term.Context())). Match them with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
	ErrInvalidConfig = errors.New("election: invalid config")
	// ErrInvalidName wraps an invalid project or queue name; the message names the field and the rule.
	ErrInvalidName = errors.New("election: invalid name")

	// ErrNotLeader is returned by Guard when the term is over or etcd no longer holds the term's key at
	// the term's revision: a newer leader may exist, and nothing was written.
	ErrNotLeader = errors.New("election: not leader")
	// ErrSessionLost means the process's lease can no longer be trusted; every term of the session ends.
	ErrSessionLost = errors.New("election: session lost")
	// ErrLeaseDeadline is the session loss raised by the watchdog at (local lease deadline - SafetyMargin),
	// before the server can expire the lease.
	ErrLeaseDeadline = fmt.Errorf("%w: local lease deadline minus safety margin reached", ErrSessionLost)
	// ErrLeaseNotFound is the session loss reported when etcd no longer knows the lease.
	ErrLeaseNotFound = fmt.Errorf("%w: lease not found on the server", ErrSessionLost)
	// ErrKeyLost ends a term whose key was deleted or replaced in etcd by someone else.
	ErrKeyLost = errors.New("election: leader key deleted or replaced")
	// ErrResigned ends a term that was resigned.
	ErrResigned = errors.New("election: resigned")
	// ErrClosed is returned after Close, and ends the terms still alive when Close is called.
	ErrClosed = errors.New("election: elector closed")
	// ErrStepAside, wrapped in the error of an OnElected callback, asks Run to let the other
	// candidates go first: this process stands again only after RetryMax, however short its backoff.
	// A leader that failed for a reason of its own (a broken configuration, say) thus hands the queue
	// to a worker that may do better, instead of winning it back at once.
	ErrStepAside = errors.New("election: leader steps aside")
	// ErrAlreadyCampaigning is returned when this Elector already campaigns for the same project and queue,
	// leads it, or still runs Run's leader callback of a term of it that ended.
	ErrAlreadyCampaigning = errors.New("election: already campaigning for this project and queue")
)

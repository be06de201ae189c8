package registry

import "errors"

// Errors returned by this package; match them with errors.Is.
var (
	// ErrInvalidConfig wraps every configuration error; the message names the field and the rule.
	ErrInvalidConfig = errors.New("registry: invalid config")
	// ErrInvalidRegistration wraps a refused registration; the message names the field and the rule.
	ErrInvalidRegistration = errors.New("registry: invalid registration")
	// ErrInvalidArgument wraps any other refused argument (a queue or server ID that is not a valid
	// name, a negative heartbeat count, a bad page size or cursor); the message names it and the rule.
	ErrInvalidArgument = errors.New("registry: invalid argument")

	// ErrNotFound means no record exists for the (queue, server ID): it was never registered, or it
	// was deregistered or evicted longer than Retention ago.
	ErrNotFound = errors.New("registry: worker not found")
	// ErrNotRegistered answers the heartbeat of a worker the registry does not hold as ONLINE or
	// DRAINING (never registered, deregistered, evicted, expired, or a record that cannot be read):
	// the worker should Register again.
	ErrNotRegistered = errors.New("registry: worker not registered")
	// ErrOffline refuses to drain a worker that is already OFFLINE.
	ErrOffline = errors.New("registry: worker is offline")
	// ErrMalformed wraps a record, index entry or key that this package would not have written; the
	// message names the key and the field.
	ErrMalformed = errors.New("registry: malformed record")

	// ErrNotLeader means the term handed to Evict no longer holds: nothing more was evicted.
	ErrNotLeader = errors.New("registry: term no longer holds")
	// ErrSuperseded means a leader with a higher fencing token has already evicted on the queue: this
	// term is stale, and nothing was evicted.
	ErrSuperseded = errors.New("registry: superseded by a higher fencing token")
)

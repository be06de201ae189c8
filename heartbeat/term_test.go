package heartbeat_test

import (
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
)

// The election's term is what a Node hands this package: it must satisfy heartbeat.Term.
var _ heartbeat.Term = (*election.Term)(nil)

package registry_test

import (
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/registry"
)

// The election's term is what a Node hands this package: it must satisfy registry.Term.
var _ registry.Term = (*election.Term)(nil)

// Package security_test runs Baton against servers that demand what production security teams
// demand: etcd with TLS, client certificates, authentication and a role limited to Baton's key
// prefixes; Redis with a password, an ACL user limited to Baton's keys, and TLS; a Temporal namespace
// of its own. It checks that Baton works with the right credentials, fails clearly with wrong ones,
// does not hammer a server that refuses it, and never prints a secret.
package security_test

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/integration/tests/testkit"
)

var temporalServer *temporalx.Server

// namespace is not "default", so that every test shows the namespace is carried end to end.
const namespace = "baton-security"

// The tests share one Temporal server; every test stops what it started (goleak).
func TestMain(m *testing.M) {
	testkit.TemporalMain(m, temporalx.Options{Namespace: namespace}, &temporalServer)
}

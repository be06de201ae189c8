// Package testkit holds the helpers only the integration test packages share (waiting on a
// condition in a test, goroutine leak checks, a dispatcher that closes on a signal); what tools
// share with them is in package harness.
package testkit

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

// TemporalMain is TestMain for packages whose tests share one Temporal server (temporalx.Main): the
// server is started into *srv and stopped after the tests, which then fail when goroutines are left.
func TemporalMain(m *testing.M, opts temporalx.Options, srv **temporalx.Server) {
	temporalx.Main(m, opts, srv, func(code int) int { return harness.CheckLeaks(code) })
}

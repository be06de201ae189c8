// Package ops_test checks Baton's operations artefacts: the Prometheus alert rules (promtool check
// and unit tests), the Prometheus configuration and the Grafana dashboard of deploy/, the
// docker-compose.yml staging stack, and that every metric the dashboard and the rules use is one a
// real demo worker exports.
package ops_test

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/integration/tests/testkit"
)

var temporalServer *temporalx.Server

func TestMain(m *testing.M) { testkit.TemporalMain(m, temporalx.Options{}, &temporalServer) }

package dispatcher_test

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/integration/tests/testkit"
)

// temporalServer is the Temporal server the tests share; each test has its own task
// queue, workflow IDs and etcd.
var temporalServer *temporalx.Server

// Every test stops what it started (goleak).
func TestMain(m *testing.M) {
	testkit.TemporalMain(m, temporalx.Options{DynamicConfig: map[string]any{
		"matching.numTaskqueueReadPartitions":  1,
		"matching.numTaskqueueWritePartitions": 1,
	}}, &temporalServer)
}

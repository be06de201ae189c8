// Package sim_test drives the deterministic simulator: TestSim... run seeded batches, TestConformance...
// hold the models to the real servers.
package sim_test

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/harness"
)

func TestMain(m *testing.M) { harness.VerifyTestMain(m) }

package registry_test

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/harness"
)

// Every test stops what it started (Redis servers, etcd members, heartbeat loops).
func TestMain(m *testing.M) { harness.VerifyTestMain(m) }

package election_test

import (
	"testing"

	"github.com/baton-run/baton/integration/servers/harness"
)

// Every test stops what it started: Electors, clients, proxies and embedded etcd members.
func TestMain(m *testing.M) { harness.VerifyTestMain(m) }

package ledger

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

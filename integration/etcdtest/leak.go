package etcdtest

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/integration/testkit"
)

// LeakGrace is how long VerifyTestMain waits for goroutines to exit. After a
// member stops, etcd's peer HTTP connections can take up to
// rafthttp.ConnReadTimeout (5s) to drain: net/http aborts a pending
// background read by setting a past read deadline, but etcd's timeoutConn
// resets the deadline (now+5s) on every Read, so a read that starts just
// after the abort blocks until then. These goroutines do end; goleak's own
// retry window (well under a second) is too short for them.
const LeakGrace = 10 * time.Second

// VerifyTestMain is goleak.VerifyTestMain for packages that use etcdtest (options passed to
// goleak), with a grace period of LeakGrace.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	testkit.VerifyTestMain(m, LeakGrace, func() error { return goleak.Find(opts...) })
}

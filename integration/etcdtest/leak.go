package etcdtest

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// LeakGrace is how long VerifyTestMain waits for goroutines to exit. After a
// member stops, etcd's peer HTTP connections can take up to
// rafthttp.ConnReadTimeout (5s) to drain: net/http aborts a pending
// background read by setting a past read deadline, but etcd's timeoutConn
// resets the deadline (now+5s) on every Read, so a read that starts just
// after the abort blocks until then. These goroutines do end; goleak's own
// retry window (well under a second) is too short for them.
const LeakGrace = 10 * time.Second

// VerifyTestMain is goleak.VerifyTestMain for packages that use etcdtest:
// it runs the tests and, if they passed, checks with goleak.Find (options
// passed through) that no goroutine is left, polling up to LeakGrace instead
// of goleak's short retry window.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := findLeaks(LeakGrace, opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func findLeaks(grace time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(grace)
	for {
		err := goleak.Find(opts...)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

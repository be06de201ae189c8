// Package testkit holds the helpers only the integration test packages share (waiting on a
// condition in a test, goroutine leak checks, a dispatcher that closes on a signal); what tools
// share with them is in package harness.
package testkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/integration/harness"
)

// Eventually is Poll for tests, every 20 ms: it fails the test, naming what, when d passes first.
func Eventually(t testing.TB, d time.Duration, what string, f func() error) {
	t.Helper()
	if err := harness.Poll(context.Background(), d, 20*time.Millisecond, f); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// LeakGrace is how long VerifyTestMain and FindLeaks wait for goroutines to exit. After an etcd
// member stops, its peer HTTP connections can take up to rafthttp.ConnReadTimeout (5s) to drain:
// net/http aborts a pending background read by setting a past read deadline, but etcd's timeoutConn
// resets the deadline (now+5s) on every Read, so a read that starts just after the abort blocks
// until then. These goroutines do end; goleak's own retry window (well under a second) is too short
// for them. The Temporal server runs in its own process: it leaves nothing in the test's.
const LeakGrace = 10 * time.Second

// FindLeaks polls goleak.Find(opts...) until it reports no goroutine left or LeakGrace has passed:
// some goroutines end seconds after their owner has stopped.
func FindLeaks(opts ...goleak.Option) error {
	if err := harness.Poll(context.Background(), LeakGrace, 200*time.Millisecond, func() error { return goleak.Find(opts...) }); err != nil {
		return errors.Unwrap(err)
	}
	return nil
}

// VerifyTestMain is goleak.VerifyTestMain with a grace period: it runs the tests and, if they
// passed, fails them when FindLeaks(opts...) does.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) { os.Exit(CheckLeaks(m.Run(), opts...)) }

// CheckLeaks returns the exit code of a test binary whose tests exited with code: 1 when they
// passed but FindLeaks(opts...) finds goroutines left, which it says on stderr.
func CheckLeaks(code int, opts ...goleak.Option) int {
	if code == 0 {
		if err := FindLeaks(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			return 1
		}
	}
	return code
}

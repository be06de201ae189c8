package temporalx

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/integration/testkit"
)

// LeakGrace is how long VerifyTestMain waits for goroutines to exit. It covers etcdtest.LeakGrace
// (10s), so that packages using both can use temporalx.VerifyTestMain. The Temporal server runs in
// its own process: every goroutine left in the test's is a leak.
const LeakGrace = 10 * time.Second

// VerifyTestMain is goleak.VerifyTestMain for packages that use temporalx (options passed to
// goleak), with a grace period of LeakGrace.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	testkit.VerifyTestMain(m, LeakGrace, func() error { return goleak.Find(opts...) })
}

// Main is TestMain for packages whose tests share one Temporal server: it starts the server into
// *srv, runs the tests, stops the server, checks for leaks as VerifyTestMain does, and exits.
//
// Without opts.LogFile, the server logs to a file that is kept (in testkit.EnvLogDir), and named,
// when the package fails; so do the SDK clients of NewClient without opts.Logger.
func Main(m *testing.M, opts Options, srv **Server) {
	var log *testkit.LogFile
	if opts.LogFile == "" && os.Getenv(EnvAddress) == "" {
		var err error
		if log, err = testkit.NewLogFile("temporal"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		opts.LogFile = log.Path
		if opts.Logger == nil {
			opts.Logger = log.Logger
		}
	}
	keepLog := func(code int) {
		if log == nil {
			return
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "temporal server log kept: %s\n", log.Path)
		}
		if err := log.Close(code != 0); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	s, err := StartServer(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		keepLog(1)
		os.Exit(1)
	}
	s.log = log
	*srv = s
	code := m.Run()
	_ = s.Close()
	if code == 0 {
		if err := testkit.FindLeaks(LeakGrace, func() error { return goleak.Find() }); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	keepLog(code)
	os.Exit(code)
}

package temporalx

import (
	"fmt"
	"os"
	"testing"

	"github.com/baton-run/baton/integration/testkit"
)

// VerifyTestMain is testkit.VerifyTestMain, for packages that use temporalx.
var VerifyTestMain = testkit.VerifyTestMain

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
		opts.logTo(log)
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
		if err := testkit.FindLeaks(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	keepLog(code)
	os.Exit(code)
}

package temporalx

import (
	"fmt"
	"os"
	"testing"

	"github.com/baton-run/baton/integration/testkit"
)

// Main is TestMain for packages whose tests share one Temporal server: it starts the server into
// *srv, runs the tests, stops the server, checks for leaks as testkit.VerifyTestMain does, and exits.
//
// Without opts.LogFile, the server logs to a file that is kept (in testkit.EnvLogDir), and named,
// when the package fails; so do the SDK clients of NewClient without opts.Logger.
func Main(m *testing.M, opts Options, srv **Server) {
	var log *testkit.LogFile
	var err error
	if opts.LogFile == "" && os.Getenv(EnvAddress) == "" {
		log, err = testkit.NewLogFile("temporal")
		opts.logTo(log)
	}
	if err == nil {
		*srv, err = StartServer(opts)
	}
	code := 1
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
	} else {
		(*srv).log = log
		code = m.Run()
		_ = (*srv).Close()
		code = testkit.CheckLeaks(code)
	}
	stderrf := func(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
	if err := log.Done(code != 0, stderrf); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	os.Exit(code)
}

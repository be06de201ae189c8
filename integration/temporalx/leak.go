package temporalx

import (
	"fmt"
	"os"
	"regexp"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/integration/testkit"
)

// Goroutines left behind by the in-process Temporal server.
//
// temporal.Server.Stop (v1.32.1) does not end all goroutines the server has started; some never
// end (the worker service's scanner SDK workers, never-closed internal gRPC clients, ringpop and
// tally tickers, the metrics and pprof HTTP servers, the SQLite opener), and ringpop's heartbeat
// loops end up to ~15s late. Every goroutine started by StartServer/Stop carries a pprof label
// (children inherit labels), and VerifyTestMain ignores exactly the goroutines that carry it: a
// gRPC connection or an SDK worker that the code under test forgets to close is still a leak.
var serverLabels = pprof.Labels(labelKey, labelValue)

const (
	labelKey   = "temporalx"
	labelValue = "server"
)

// LeakGrace is how long VerifyTestMain waits for goroutines to exit. It covers the ringpop
// heartbeat loops of a stopped server (they sleep up to ~15s) and etcdtest.LeakGrace (10s), so that
// packages using both can use temporalx.VerifyTestMain.
const LeakGrace = 20 * time.Second

// VerifyTestMain is goleak.VerifyTestMain for packages that use temporalx: it runs the tests and, if
// they passed, checks with FindLeaks (options passed to goleak) that no goroutine is left but the
// in-process Temporal servers'.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	testkit.VerifyTestMain(m, LeakGrace, func() error { return FindLeaks(0, opts...) })
}

// FindLeaks polls goleak.Find(opts...) up to grace and returns an error naming the goroutines left
// that no in-process Temporal server of this package started.
func FindLeaks(grace time.Duration, opts ...goleak.Option) error {
	// Go 1.26's tracebacklabels=1 prints each goroutine's pprof labels in its stack header, which
	// goleak's error quotes: the server's goroutines are told apart one by one.
	godebug, had := os.LookupEnv("GODEBUG")
	os.Setenv("GODEBUG", strings.TrimPrefix(godebug+",tracebacklabels=1", ","))
	defer func() {
		if had {
			os.Setenv("GODEBUG", godebug)
		} else {
			os.Unsetenv("GODEBUG")
		}
	}()
	return testkit.FindLeaks(grace, func() error { return withoutServerGoroutines(goleak.Find(opts...)) })
}

// leakHeader matches goleak's line before each goroutine's stack, which quotes its state and labels.
var leakHeader = regexp.MustCompile(`Goroutine \d+ in state [^\n]*`)

// withoutServerGoroutines returns leakErr (of goleak.Find) without the goroutines that carry the
// server label, or nil if no other is left.
func withoutServerGoroutines(leakErr error) error {
	if leakErr == nil {
		return nil
	}
	msg := leakErr.Error()
	at := leakHeader.FindAllStringIndex(msg, -1)
	if len(at) == 0 {
		return leakErr // unknown format: report as is
	}
	label := fmt.Sprintf("%q: %q", labelKey, labelValue)
	var left []string
	for i, loc := range at {
		end := len(msg)
		if i+1 < len(at) {
			end = at[i+1][0]
		}
		if !strings.Contains(msg[loc[0]:loc[1]], label) {
			left = append(left, msg[loc[0]:end])
		}
	}
	if len(left) == 0 {
		return nil
	}
	return fmt.Errorf("found %d unexpected goroutines (not started by a temporalx server):\n%s", len(left), strings.Join(left, "\n"))
}

// Main is TestMain for packages whose tests share one in-process Temporal server: it starts the server
// into *srv, runs the tests, stops the server, checks for leaks as VerifyTestMain does, and exits.
//
// Without opts.Logger, the server logs to a file that is kept (in testkit.EnvLogDir), and named, when
// the package fails.
func Main(m *testing.M, opts Options, srv **Server) {
	var log *testkit.LogFile
	if opts.Logger == nil && os.Getenv(EnvAddress) == "" {
		var err error
		if log, err = testkit.NewLogFile("temporal"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		opts.Logger = log.Logger
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
		if err := FindLeaks(LeakGrace); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	keepLog(code)
	os.Exit(code)
}

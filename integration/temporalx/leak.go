package temporalx

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/baton-run/baton/integration/testkit"
)

// Goroutines left behind by the in-process Temporal server.
//
// temporal.Server.Stop (v1.32.1) does not end all goroutines the server has
// started; these never end (checked 60s after Close):
//
//   - SDK workers of the worker service's scanner (task queue scavenger,
//     history scanner, ...) and parent close policy processor: started, never
//     stopped ("TODO: Nothing is gracefully stopping these workers" in
//     service/worker/scanner/scanner.go). Their pollers retry against the
//     closed frontend port forever (SDK backoff).
//   - the gRPC client connections of the server's internal clients (system
//     SDK client, history/matching/frontend clients), never closed: grpc
//     CallbackSerializer and addrConn reconnect goroutines, the SDK's
//     sharedNamespaceWorker of the system client.
//   - ringpop's stat tickers (for range ticker.C after ticker.Stop), one pair
//     per service.
//   - the Prometheus metrics HTTP server (tally) and the pprof HTTP server,
//     still listening on their ports, tally's report loop.
//   - the SQLite database's database/sql connection opener (DB not closed).
//   - go-metrics' global meter arbiter (one per process, by design).
//
// And one that ends late: ringpop membership heartbeat loops sleep up to
// ~15s before they notice the stop.
//
// Every goroutine started by StartServer/Stop carries a pprof label
// (serverLabels; children inherit labels), which VerifyTestMain uses to
// ignore exactly these goroutines and nothing else: a gRPC connection or an
// SDK worker that the code under test forgets to close is still a leak.
var serverLabels = pprof.Labels(labelKey, labelValue)

const (
	labelKey   = "temporalx"
	labelValue = "server"
)

// LeakGrace is how long VerifyTestMain waits for goroutines to exit. It
// covers the ringpop heartbeat loops of a stopped server (they sleep up to
// ~15s) and etcdtest.LeakGrace (10s), so that packages using both can use
// temporalx.VerifyTestMain.
const LeakGrace = 20 * time.Second

// VerifyTestMain is goleak.VerifyTestMain for packages that use temporalx: it
// runs the tests and, if they passed, checks with goleak.Find (options
// passed through) that no goroutine is left, ignoring goroutines of the
// in-process Temporal servers (see FindLeaks), polling up to LeakGrace.
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	if code == 0 {
		if err := FindLeaks(LeakGrace, opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: errors on successful test run: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// FindLeaks polls goleak.Find(opts...) up to grace and returns an error if
// goroutines are left that were not started by an in-process Temporal server
// of this package. A server's goroutines are recognized by the pprof label
// that StartServer and Stop set: the goroutine profile gives, per stack, how
// many goroutines carry it; a stack that goleak reports more often than
// that is a leak. (A goroutine that shares its stack with server goroutines,
// e.g. a grpc ClientConn's, is told apart by the counts.)
func FindLeaks(grace time.Duration, opts ...goleak.Option) error {
	deadline := time.Now().Add(grace)
	for {
		err := goleak.Find(opts...)
		if err == nil {
			return nil
		}
		err = withoutServerGoroutines(err)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// LeakOptions returns goleak options that ignore what a stopped in-process
// Temporal server leaves behind, for plain goleak.VerifyTestMain/VerifyNone
// (or etcdtest.VerifyTestMain). They match by function, so they are coarse:
// they also hide the same kind of goroutine when the code under test leaks
// it (a gRPC ClientConn or SDK client/worker not closed, a database/sql DB
// not closed). Prefer VerifyTestMain, which needs none of them. The ringpop
// heartbeat loops end within ~15s: use a grace period (not included here).
func LeakOptions() []goleak.Option {
	var o []goleak.Option
	for _, f := range leakTopFunctions {
		o = append(o, goleak.IgnoreTopFunction(f))
	}
	for _, f := range leakAnyFunctions {
		o = append(o, goleak.IgnoreAnyFunction(f))
	}
	return o
}

var leakTopFunctions = []string{
	// Never-closed gRPC ClientConns (server-internal clients).
	"google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run",
	// SQLite DB never closed.
	"database/sql.(*DB).connectionOpener",
	// Ringpop stat tickers, tally report loop, go-metrics arbiter.
	"github.com/temporalio/ringpop-go.(*Ringpop).startTimers.func1",
	"github.com/temporalio/ringpop-go.(*Ringpop).startTimers.func2",
	"github.com/uber-go/tally/v4.(*scope).reportLoop",
	"github.com/rcrowley/go-metrics.(*meterArbiter).tick",
}

var leakAnyFunctions = []string{
	// Never-closed gRPC ClientConns reconnecting.
	"google.golang.org/grpc.(*addrConn).resetTransportAndUnlock",
	// Never-stopped SDK workers (scanner, parent close policy) and the
	// heartbeat worker of the never-closed system SDK client.
	"go.temporal.io/sdk/internal.(*baseWorker).runPoller",
	"go.temporal.io/sdk/internal.(*baseWorker).runTaskDispatcher",
	"go.temporal.io/sdk/internal.(*baseWorker).runEagerTaskDispatcher",
	"go.temporal.io/sdk/internal.(*baseWorker).Start.func2",
	"go.temporal.io/sdk/internal.(*sharedNamespaceWorker).run",
	// Metrics and pprof HTTP servers (top: internal/poll.runtime_pollWait).
	"github.com/uber-go/tally/v4/prometheus.Configuration.NewReporter.func5",
	"go.temporal.io/server/common/pprof.(*PProfInitializerImpl).Start.func1",
}

var goroutineIDRE = regexp.MustCompile(`Goroutine (\d+) in state`)

// withoutServerGoroutines takes a goleak.Find error and returns nil if all
// goroutines it lists are server goroutines, else an error with the others.
func withoutServerGoroutines(leakErr error) error {
	var ids []int
	for _, m := range goroutineIDRE.FindAllStringSubmatch(leakErr.Error(), -1) {
		id, _ := strconv.Atoi(m[1])
		ids = append(ids, id)
	}
	if len(ids) == 0 {
		return leakErr // unknown format: report as is
	}
	stacks := allStacks()
	labeled := labeledStackCounts()
	perSig := map[string][]int{}
	for _, id := range ids {
		st, ok := stacks[id]
		if !ok {
			continue // ended meanwhile
		}
		perSig[st.sig] = append(perSig[st.sig], id)
	}
	var leaked []int
	for sig, gids := range perSig {
		if n := len(gids) - labeled[sig]; n > 0 {
			sort.Ints(gids)
			leaked = append(leaked, gids[:n]...)
		}
	}
	if len(leaked) == 0 {
		return nil
	}
	sort.Ints(leaked)
	var b strings.Builder
	fmt.Fprintf(&b, "found %d unexpected goroutines (not started by a temporalx server):\n", len(leaked))
	for _, id := range leaked {
		b.WriteString(stacks[id].text)
		b.WriteString("\n")
	}
	return errors.New(b.String())
}

type goroutineStack struct {
	sig  string // function names, top first, runtime.* left out
	text string
}

// allStacks parses runtime.Stack(all) into goroutine id -> stack.
func allStacks() map[int]goroutineStack {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[int]goroutineStack{}
	for _, block := range strings.Split(string(buf), "\n\n") {
		lines := strings.Split(strings.TrimSpace(block), "\n")
		if len(lines) == 0 || !strings.HasPrefix(lines[0], "goroutine ") {
			continue
		}
		f := strings.Fields(lines[0])
		if len(f) < 2 {
			continue
		}
		id, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		var funcs []string
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "created by ") || strings.HasPrefix(l, "...") {
				continue
			}
			if i := strings.LastIndex(l, "("); i > 0 {
				l = l[:i]
			}
			funcs = appendFunc(funcs, l)
		}
		out[id] = goroutineStack{sig: strings.Join(funcs, "\n"), text: block}
	}
	return out
}

// labeledStackCounts parses the goroutine profile (debug=1: stacks with
// counts and labels) into stack signature -> number of goroutines with the
// server label.
func labeledStackCounts() map[string]int {
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 1); err != nil {
		return nil
	}
	want := fmt.Sprintf("%q:%q", labelKey, labelValue)
	out := map[string]int{}
	sc := bufio.NewScanner(&buf)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	var (
		count   int
		labeled bool
		funcs   []string
	)
	flush := func() {
		if labeled && count > 0 {
			out[strings.Join(funcs, "\n")] += count
		}
		count, labeled, funcs = 0, false, nil
	}
	for sc.Scan() {
		l := sc.Text()
		switch {
		case l == "":
			flush()
		case strings.HasPrefix(l, "# labels: "):
			labeled = strings.Contains(l, want)
		case strings.HasPrefix(l, "#\t"):
			// "#\t0x4c89f0\tpkg.func+0xb0\tfile:line"
			f := strings.Split(l, "\t")
			if len(f) >= 3 {
				name := f[2]
				if i := strings.LastIndex(name, "+0x"); i > 0 {
					name = name[:i]
				}
				funcs = appendFunc(funcs, name)
			}
		case !strings.HasPrefix(l, "#"):
			// "N @ 0x... 0x..."
			if i := strings.Index(l, " @ "); i > 0 {
				count, _ = strconv.Atoi(l[:i])
			}
		}
	}
	flush()
	return out
}

func appendFunc(funcs []string, name string) []string {
	name = strings.TrimSpace(name)
	if name == "" || strings.HasPrefix(name, "runtime.") {
		return funcs
	}
	return append(funcs, name)
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

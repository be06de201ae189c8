package workerproc

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/integration/servers/harness"
)

// Build builds cmd/demo-worker of the root module (which holds its dependencies) with
// harness.GoBuild, once per process, and returns the binary's path.
var Build = buildOnce("./cmd/demo-worker")

// BuildBaton builds cmd/baton, the operator's command, the same way.
var BuildBaton = buildOnce("./cmd/baton")

// buildOnce returns a function that builds pkg of the root module once per process.
func buildOnce(pkg string) func() (string, error) {
	return sync.OnceValues(func() (string, error) {
		_, file, _, _ := runtime.Caller(0)
		bin, err := harness.GoBuild(filepath.Join(filepath.Dir(file), "..", "..", ".."), pkg)
		if err != nil {
			return "", fmt.Errorf("%w (pass a prebuilt binary instead)", err)
		}
		return bin, nil
	})
}

// BuildT is Build for tests: t.Fatal on error.
func BuildT(t testing.TB) string {
	t.Helper()
	bin, err := Build()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Environ is this process's environment without the BATON_* variables a demo worker would refuse
// or should not inherit: only the client settings (endpoints, credentials, TLS files) are kept, and
// a starter's own variables, appended after them, win (the last value of a key wins).
func Environ() []string {
	keep := clients.EnvVars()
	return slices.DeleteFunc(os.Environ(), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return strings.HasPrefix(k, "BATON_") && !slices.Contains(keep, k)
	})
}

// Proc is one `demo-worker run` (or `load`) process. Everything it writes to stdout and stderr is
// kept, in memory or in Options.LogFile; its event lines (-events stdout) are also parsed (for
// Events), unless Options.OnLine takes them.
type Proc struct {
	// ID is the process's server ID, Addr the listen address of its HTTP endpoints.
	ID, Addr string

	cmd     *exec.Cmd
	done    chan struct{}
	code    int
	logFile string
	onLine  func([]byte)

	mu     sync.Mutex
	events []event.Event
	raw    bytes.Buffer
	out    io.Writer // raw, or the log file
}

// Options are the optional parts of a start.
type Options struct {
	// Load runs `load` (a producer of dispatch requests, with no HTTP address) instead of `run`.
	Load bool
	// LogFile, when set, receives the output instead of memory (Output reads it back): a long-lived
	// process's log stays on disk, for whoever reads it afterwards.
	LogFile string
	// OnLine, when set, is called with every output line (each stream in order), in place of the
	// parsed store of events that Events reads.
	OnLine func(line []byte)
}

// Start runs `bin run -server-id id -http <an inherited socket> args...`, or with o.Load `bin load args...`
// (id then names it in logs), with env appended to Environ(). The process has its own process group
// (a Ctrl-C reaches its starter, which stops it) and is killed if this process dies (Pdeathsig).
func Start(o Options, bin, id string, env []string, args ...string) (*Proc, error) {
	p := &Proc{ID: id, done: make(chan struct{}), logFile: o.LogFile, onLine: o.OnLine}
	p.cmd = exec.Command(bin)
	argv := append([]string{"load", "-json"}, args...) // summaries as loadreport.Summary, for Summary
	if !o.Load {
		// The worker serves on a socket bound here and inherited: a port chosen here and bound by
		// the worker later could be taken in between by another test package's process.
		sock, err := harness.ListenSocket()
		if err != nil {
			return nil, err
		}
		defer sock.Close()
		p.Addr = sock.Addr
		// Baton's typed events on stdout (Events reads them), never its log text.
		argv = append([]string{"run", "-server-id", id, "-http", sock.Pass(p.cmd), "-events", "stdout"}, args...)
	}
	p.cmd.Args = append(p.cmd.Args, argv...)
	p.out = &p.raw
	var logf *os.File
	if o.LogFile != "" {
		f, err := os.Create(o.LogFile)
		if err != nil {
			return nil, err
		}
		logf, p.out = f, f
	}
	p.cmd.Env = append(Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	var stdout io.ReadCloser
	if err == nil {
		stdout, err = p.cmd.StdoutPipe()
	}
	if err == nil {
		err = p.cmd.Start()
	}
	if err != nil {
		if logf != nil {
			logf.Close()
		}
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.scan(stderr) })
	wg.Go(func() { p.scan(stdout) })
	go func() {
		wg.Wait()
		_ = p.cmd.Wait()
		if logf != nil {
			logf.Close()
		}
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return p, nil
}

// StartT is Start for tests: t.Fatal on error; on cleanup the process is killed and, if the test
// failed, the tail of its output is logged.
func StartT(t testing.TB, o Options, bin, id string, env []string, args ...string) *Proc {
	t.Helper()
	p, err := Start(o, bin, id, env, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", p.ID, p.Tail(6000))
		}
	})
	return p
}

func (p *Proc) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		p.mu.Lock()
		_, _ = p.out.Write(line)
		_, _ = p.out.Write([]byte{'\n'})
		if p.onLine != nil {
			p.onLine(line)
		} else if e := (event.Event{}); json.Unmarshal(line, &e) == nil && e.Kind != "" {
			p.events = append(p.events, e)
		}
		p.mu.Unlock()
	}
}

// Signal sends sig to the process (nothing once it has exited).
func (p *Proc) Signal(sig syscall.Signal) {
	if p.cmd.Process != nil && !p.Exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

// Kill continues a stopped process, kills it and waits for it and its output.
func (p *Proc) Kill() {
	p.Signal(syscall.SIGCONT)
	p.Signal(syscall.SIGKILL)
	<-p.done
}

// WaitReady waits until /readyz answers 200. It fails, with the tail of the output, when the
// process exits, ctx ends or timeout passes first.
func (p *Proc) WaitReady(ctx context.Context, timeout time.Duration) error {
	err := harness.Poll(ctx, timeout, 50*time.Millisecond, func() error {
		switch {
		case p.Exited():
			return harness.Final(fmt.Errorf("exited with code %d", p.Code()))
		case !Ready(p.Addr):
			return errors.New("/readyz does not answer 200")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%s not ready: %w: %s", p.ID, err, p.Tail(1500))
	}
	return nil
}

// Done is closed once the process has exited and all its output is read.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether Done is closed.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Code is the exit code once Done is closed (-1 for a signal).
func (p *Proc) Code() int {
	<-p.done
	return p.code
}

// Output returns everything the process has written so far, stderr and stdout interleaved by line.
func (p *Proc) Output() string {
	if p.logFile != "" {
		b, _ := os.ReadFile(p.logFile)
		return string(b)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// Tail is the last n bytes of Output, for an error message.
func (p *Proc) Tail(n int) string { return harness.Tail(p.Output(), n) }

// Summary returns the last summary a `load` process printed (it runs with -json), and false before
// the first.
func (p *Proc) Summary() (loadreport.Summary, bool) { return loadreport.Last(p.Output()) }

// Events returns the events of kind the process emitted at or after since (event.Event.At).
func (p *Proc) Events(kind event.Kind, since time.Time) []event.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []event.Event
	for _, e := range p.events {
		if e.Kind == kind && !e.At.Before(since) {
			out = append(out, e)
		}
	}
	return out
}

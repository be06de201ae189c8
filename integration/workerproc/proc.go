package workerproc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/testkit"
)

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// Build builds cmd/demo-worker once per process, in the root module (which holds its dependencies),
// into a temporary directory, and returns the binary's path.
func Build() (string, error) {
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "baton-demo-worker-")
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "demo-worker")
		cmd := exec.Command("go", "build", "-o", buildBin, "./cmd/demo-worker")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/demo-worker: %v\n%s", err, out)
		}
	})
	return buildBin, buildErr
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

// Proc is one `demo-worker run` process. Everything it writes to stdout and stderr is kept; its
// JSON log lines are also parsed.
type Proc struct {
	// ID is the process's server ID, Addr the listen address of its HTTP endpoints.
	ID, Addr string

	cmd  *exec.Cmd
	done chan struct{}
	code int

	mu   sync.Mutex
	logs []map[string]any
	raw  bytes.Buffer
}

// Start runs `bin run -server-id id -http <free port> args...` with env appended to this process's
// environment. The process is killed if this process dies (Pdeathsig).
func Start(bin, id string, env []string, args ...string) (*Proc, error) {
	addr, err := testkit.FreeAddr()
	if err != nil {
		return nil, err
	}
	return start(bin, id, addr, env, append([]string{"run", "-server-id", id, "-http", addr}, args...))
}

// StartLoad runs `bin load args...` (a producer of dispatch requests) with env appended to this
// process's environment; id names it in logs. It has no HTTP address.
func StartLoad(bin, id string, env []string, args ...string) (*Proc, error) {
	return start(bin, id, "", env, append([]string{"load"}, args...))
}

func start(bin, id, addr string, env, argv []string) (*Proc, error) {
	p := &Proc{ID: id, Addr: addr, done: make(chan struct{})}
	p.cmd = exec.Command(bin, argv...)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.scan(stderr) })
	wg.Go(func() { p.scan(stdout) })
	go func() {
		wg.Wait()
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	return p, nil
}

// StartT is Start for tests: t.Fatal on error; on cleanup the process is killed and, if the test
// failed, the tail of its output is logged.
func StartT(t testing.TB, bin, id string, env []string, args ...string) *Proc {
	t.Helper()
	p, err := Start(bin, id, env, args...)
	return cleanupT(t, p, err)
}

// StartLoadT is StartLoad for tests, as StartT is for Start.
func StartLoadT(t testing.TB, bin, id string, env []string, args ...string) *Proc {
	t.Helper()
	p, err := StartLoad(bin, id, env, args...)
	return cleanupT(t, p, err)
}

func cleanupT(t testing.TB, p *Proc, err error) *Proc {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			t.Logf("%s output:\n%s", p.ID, testkit.Tail(p.Output(), 6000))
		}
	})
	return p
}

func (p *Proc) scan(r io.Reader) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var m map[string]any
		p.mu.Lock()
		p.raw.Write(line)
		p.raw.WriteByte('\n')
		if json.Unmarshal(line, &m) == nil {
			m["_seen"] = time.Now()
			p.logs = append(p.logs, m)
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
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.raw.String()
}

// Logged returns the JSON log lines whose message contains msg, seen at or after since.
func (p *Proc) Logged(msg string, since time.Time) []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []map[string]any
	for _, m := range p.logs {
		if s, _ := m["msg"].(string); strings.Contains(s, msg) && !m["_seen"].(time.Time).Before(since) {
			out = append(out, m)
		}
	}
	return out
}

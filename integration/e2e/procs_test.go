package e2e_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/integration/workerproc"
)

// buildDemoWorker builds cmd/demo-worker once per test binary, in the root module (which holds its
// dependencies).
var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

func demoWorker(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		dir, err := os.MkdirTemp("", "baton-e2e-")
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
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// proc is one demo-worker process.
type proc struct {
	id   string
	addr string
	cmd  *exec.Cmd
	done chan struct{}
	code int

	mu   sync.Mutex
	logs []map[string]any
	raw  bytes.Buffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// startProc runs a demo worker with env (endpoints and BATON_* settings) and its own HTTP port.
func startProc(t *testing.T, bin, id string, env []string) *proc {
	t.Helper()
	p := &proc{id: id, addr: freeAddr(t), done: make(chan struct{})}
	p.cmd = exec.Command(bin, "run", "-server-id", id, "-http", p.addr)
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(stderr)
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
	})
	go func() {
		wg.Wait()
		_ = p.cmd.Wait()
		p.code = p.cmd.ProcessState.ExitCode()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.signal(syscall.SIGCONT)
		p.signal(syscall.SIGKILL)
		<-p.done
		if t.Failed() {
			p.mu.Lock()
			t.Logf("%s output:\n%s", p.id, tail(p.raw.String(), 6000))
			p.mu.Unlock()
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) ready() bool { return workerproc.Ready(p.addr) }

// leads returns the queue's status in p when p leads it with a dispatcher run.
func (p *proc) leads(queue string) (baton.QueueStatus, bool) {
	st, ok := workerproc.Status(p.addr)
	if !ok {
		return baton.QueueStatus{}, false
	}
	return workerproc.Leading(st, queue)
}

// logged returns the log lines of p whose message contains msg, seen after since.
func (p *proc) logged(msg string, since time.Time) []map[string]any {
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

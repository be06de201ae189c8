package e2e_test

import (
	"syscall"
	"testing"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// demoWorker builds cmd/demo-worker once per test binary.
func demoWorker(t *testing.T) string { return workerproc.BuildT(t) }

// proc is one demo-worker process.
type proc struct {
	*workerproc.Proc
	id   string
	addr string
	done <-chan struct{}
}

// startProc runs a demo worker with env (endpoints and BATON_* settings) and its own HTTP port.
func startProc(t *testing.T, bin, id string, env []string) *proc {
	t.Helper()
	p := workerproc.StartT(t, workerproc.Options{}, bin, id, env)
	return &proc{Proc: p, id: p.ID, addr: p.Addr, done: p.Done()}
}

func (p *proc) signal(sig syscall.Signal) { p.Signal(sig) }

func (p *proc) exited() bool { return p.Exited() }

func (p *proc) ready() bool { return workerproc.Ready(p.addr) }

// leads returns the queue's status in p when p leads it with a dispatcher run.
func (p *proc) leads(queue string) (baton.QueueStatus, bool) {
	st, ok := workerproc.Status(p.addr)
	if !ok {
		return baton.QueueStatus{}, false
	}
	return workerproc.Leading(st, queue)
}

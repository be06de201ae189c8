package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/baton-run/baton/cmd/demo-worker/loadreport"
	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/integration/tools/benchreport"
)

// producerSettle is the bound of each Dispatch call of a producer run (`demo-worker load -settle`): a
// call not returned within it counts as unreturned.
const producerSettle = 30 * time.Second

// A producerFleet is demo-worker processes serving the queues of one project, and the Producers
// (`demo-worker load -mode=dispatch`, each a process of its own) that call Dispatch on them: what an
// application's fleet and its callers are, measured from outside as their operators see them.
type producerFleet struct {
	bin    string
	env    []string
	queues []string
	dir    string // the producers' -accepted-out files
	procs  []*workerproc.Proc
}

// newProducerFleet starts nothing yet: start adds workers. Its env has the section's servers, project
// and queues, an election TTL of ttl and heartbeats every second.
func newProducerFleet(s *servers, project string, queues []string, ttl time.Duration) (*producerFleet, error) {
	bin, err := workerproc.Build()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "batonbench-"+project+"-")
	if err != nil {
		return nil, err
	}
	return &producerFleet{bin: bin, queues: queues, dir: dir, env: []string{
		"BATON_ETCD_ENDPOINTS=" + strings.Join(s.cluster.Endpoints(), ","),
		"BATON_TEMPORAL_ADDRESS=" + s.temporal.HostPort(), "BATON_TEMPORAL_NAMESPACE=" + s.temporal.Namespace(),
		"BATON_REDIS_ADDR=" + s.rdb.Options().Addr,
		"BATON_PROJECT=" + project, "BATON_QUEUES=" + strings.Join(queues, ","), "BATON_ELECTION_TTL=" + ttl.String(),
		"BATON_HEARTBEAT_INTERVAL=1s", "BATON_REGISTRY_HEARTBEAT_INTERVAL=1s", "BATON_LOG_LEVEL=warn",
	}}, nil
}

// start runs one more worker, with extra environment appended (the last value of a key wins), and
// waits until it is ready.
func (f *producerFleet) start(ctx context.Context, id string, extra ...string) (*workerproc.Proc, error) {
	p, err := workerproc.Start(workerproc.Options{}, f.bin, id, append(slices.Clone(f.env), extra...))
	if err != nil {
		return nil, err
	}
	f.procs = append(f.procs, p)
	return p, p.WaitReady(ctx, 2*time.Minute)
}

// close kills every process the fleet started and removes its files.
func (f *producerFleet) close() {
	for _, p := range f.procs {
		p.Kill()
	}
	os.RemoveAll(f.dir)
}

// waitLed waits until every queue has a live leader with its dispatcher run open, so that a
// producer's first calls do not measure the fleet's first takeovers.
func (f *producerFleet) waitLed(ctx context.Context, d time.Duration) error {
	for deadline := time.Now().Add(d); ; {
		led := map[string]bool{}
		for _, p := range f.procs {
			if p.Exited() {
				continue
			}
			if st, ok := workerproc.Status(p.Addr); ok {
				for _, q := range f.queues {
					if qs, ok := workerproc.Leading(st, q); ok && qs.DispatcherOpen {
						led[q] = true
					}
				}
			}
		}
		if len(led) == len(f.queues) {
			return nil
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return fmt.Errorf("queues led with an open run: %d of %d after %v", len(led), len(f.queues), d)
		}
	}
}

// rollingRestart replaces each of olds in turn by a worker named as names says, as a Deployment's
// rolling update does: the successor started and ready, then the old process sent SIGTERM and waited
// for, then a pause before the next. It returns the successors, and for each old process how long
// it took to exit and how many queues it led (with a run) when it was sent SIGTERM.
func (f *producerFleet) rollingRestart(ctx context.Context, olds []*workerproc.Proc, names []string) (news []*workerproc.Proc, stops []time.Duration, led []int, err error) {
	for i, old := range olds {
		p, err := f.start(ctx, names[i])
		if err != nil {
			return news, stops, led, err
		}
		news = append(news, p)
		n := 0
		if st, ok := workerproc.Status(old.Addr); ok {
			for _, q := range f.queues {
				if _, ok := workerproc.Leading(st, q); ok {
					n++
				}
			}
		}
		led = append(led, n)
		stopped := time.Now()
		old.Signal(syscall.SIGTERM)
		select {
		case <-old.Done():
		case <-time.After(time.Minute):
			return news, stops, led, fmt.Errorf("%s still running a minute after SIGTERM", old.ID)
		case <-ctx.Done():
			return news, stops, led, ctx.Err()
		}
		stops = append(stops, time.Since(stopped))
		if !sleepCtx(ctx, 2*time.Second) { // a rolling update waits for the new pod to settle
			return news, stops, led, ctx.Err()
		}
	}
	return news, stops, led, nil
}

// A producerRun is one `demo-worker load -mode=dispatch` process: rate Dispatch calls a second on
// each queue (Poisson arrivals), each bounded by producerSettle, until stop.
type producerRun struct {
	proc *workerproc.Proc
	out  string
}

// returnedCall is one Dispatch call that returned handled (a line of -accepted-out).
type returnedCall struct {
	queue          string
	sent, returned time.Time
}

// producerResult is what a producer run measured: its final summary (with the ledger's read-back)
// and every call that returned handled.
type producerResult struct {
	summary loadreport.Summary
	calls   []returnedCall
}

// produce starts a producer named name (its -run-id: no two runs share a dispatch key) and waits until
// its first call returned.
func (f *producerFleet) produce(ctx context.Context, name string, rate float64) (*producerRun, error) {
	r := &producerRun{out: filepath.Join(f.dir, name+".accepted")}
	var err error
	r.proc, err = workerproc.Start(workerproc.Options{Load: true}, f.bin, name, f.env, "-mode=dispatch",
		"-rate="+strconv.FormatFloat(rate, 'f', -1, 64), "-interval=1s", "-settle="+producerSettle.String(),
		"-run-id="+name, "-accepted-out="+r.out)
	if err != nil {
		return nil, err
	}
	for deadline := time.Now().Add(time.Minute); ; {
		if s, ok := r.proc.Summary(); ok && s.Handled > 0 {
			return r, nil
		}
		if r.proc.Exited() || time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			r.proc.Kill()
			return nil, fmt.Errorf("producer %s: no call returned within a minute: %s", name, r.proc.Tail(2000))
		}
	}
}

// stop ends the sending (SIGTERM), waits for the calls in flight (each bounded by producerSettle) and
// the ledger's read-back, and returns what the run measured.
func (r *producerRun) stop() (producerResult, error) {
	r.proc.Signal(syscall.SIGTERM)
	select {
	case <-r.proc.Done():
	case <-time.After(3*producerSettle + time.Minute): // the calls in flight, then the ledger's two reads
		r.proc.Kill()
		return producerResult{}, fmt.Errorf("producer %s did not finish: %s", r.proc.ID, r.proc.Tail(2000))
	}
	s, ok := r.proc.Summary()
	if r.proc.Code() != 0 || !ok || !s.Final {
		return producerResult{}, fmt.Errorf("producer %s exited %d without a final summary: %s", r.proc.ID, r.proc.Code(), r.proc.Tail(2000))
	}
	calls, err := readReturned(r.out)
	return producerResult{summary: s, calls: calls}, err
}

// readReturned reads `demo-worker load -accepted-out`: in dispatch mode, every call that returned handled.
func readReturned(path string) ([]returnedCall, error) {
	lines, err := loadreport.ReadAccepted(path)
	out := make([]returnedCall, 0, len(lines))
	for _, a := range lines {
		out = append(out, returnedCall{queue: a.Queue, sent: a.Sent, returned: a.AcceptedTime})
	}
	return out, err
}

// unreturned counts the calls that did not return handled within producerSettle: unsettled (still
// retrying when the bound ended), failed or rejected.
func (r producerResult) unreturned() int64 {
	return r.summary.Unsettled + r.summary.Errors + r.summary.Rejected
}

// latencies are send -> returned of every call, in ms; each unreturned call counts as producerSettle,
// so that a percentile is never flattered by the calls that did not come back.
func (r producerResult) latencies() []float64 {
	out := make([]float64, 0, len(r.calls)+int(r.unreturned()))
	for _, c := range r.calls {
		out = append(out, benchreport.Ms(c.returned.Sub(c.sent)))
	}
	for range r.unreturned() {
		out = append(out, benchreport.Ms(producerSettle))
	}
	return out
}

// String is the run's counts in one line, for the section's log.
func (r producerResult) String() string {
	s := r.summary
	l := fmt.Sprintf("sent %d, returned handled %d, unsettled %d, failed %d, rejected %d", s.Sent, s.Handled, s.Unsettled, s.Errors, s.Rejected)
	switch {
	case s.Ledger != nil:
		l += fmt.Sprintf("; ledger: accepted %d, handled %d, not handled %d, handled twice %d",
			s.Ledger.Accepted, s.Ledger.Handled, s.Ledger.NotHandled, s.Ledger.HandledTwice)
	case s.LedgerError != "":
		l += "; ledger unread: " + s.LedgerError
	}
	return l
}

// busyLoops starts n processes that each spin on a core, the busy machine a deploy must not depend
// on being quiet; the returned func kills them.
func busyLoops(n int) (stop func(), err error) {
	var cmds []*exec.Cmd
	stop = func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}
	for range n {
		c := exec.Command("sh", "-c", "while :; do :; done")
		c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			stop()
			return nil, fmt.Errorf("busy loop: %w", err)
		}
		cmds = append(cmds, c)
	}
	return stop, nil
}

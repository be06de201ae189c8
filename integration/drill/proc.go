package drill

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-run/baton/integration/etcdtest"

	"github.com/baton-run/baton"
)

// proc is one demo-worker process.
type proc struct {
	slot    int // worker slot, -1 for an orphan fault's solo worker
	id      string
	queues  []string
	addr    string
	logPath string
	cmd     *exec.Cmd
	started time.Time
	done    chan struct{}

	mu         sync.Mutex
	events     []event
	expectExit string    // "SIGKILL" or "SIGTERM" once the drill has sent it
	killedAt   time.Time // SIGKILL sent
	termAt     time.Time // SIGTERM sent
	exitedAt   time.Time
	code       int
	stopped    bool
	stops      []stopWindow
	last       sample
	lastOK     bool
}

type stopWindow struct {
	Stop, Resume time.Time // Resume zero while stopped
}

// sample is one /status read: the process answered st at some instant in [Sent, Recv].
type sample struct {
	Sent, Recv time.Time
	St         baton.Status
}

// event is one log line of interest.
type event struct {
	Msg      string
	Level    string
	TS       time.Time
	Queue    string
	Token    int64
	HasToken bool
	WallNS   int64
	Started  int64 // started_wall_ns
	RunID    string
	Prior    string // prior_run_id
	ServerID string
	Err      string
}

// Messages the drill reads from the workers' logs.
const (
	msgTermStarted   = "leadership started"
	msgTermEnded     = "leadership ended"
	msgTakenOver     = "dispatcher taken over"
	msgPriorEnded    = "prior dispatcher run terminated"
	msgStepDownEnded = "own dispatcher run terminated on step-down"
	msgHBRefused     = "heartbeat refused: a newer owner's entry is stored"
	msgHBFailed      = "heartbeat write failed; retrying at the next interval"
	msgHBRecovered   = "heartbeat writes recovered"
	msgStaleEnded    = "stale dispatcher run terminated"
	msgStaleClosed   = "stale dispatcher run was already closed"
	msgEvicted       = "worker evicted"
	msgTakeoverFail  = "dispatcher takeover failed"
	msgStartFailed   = "start failed"
	// msgBalance is logged by package balance right before it resigns a term it hands over (to spread
	// leadership, drain, or move it forward in a rollout).
	msgBalance = "handing a queue over"
)

// actionMsgs are the log lines that show a process acting for a term (its token): a SIGSTOPped
// process must log none of them for a term it held when it was stopped once it is resumed.
var actionMsgs = map[string]bool{msgTakenOver: true, msgPriorEnded: true, msgStepDownEnded: true, msgHBRefused: true,
	msgHBFailed: true, msgHBRecovered: true, msgStaleEnded: true, msgStaleClosed: true, msgEvicted: true}

var keptMsgs = func() map[string]bool {
	m := map[string]bool{msgTermStarted: true, msgTermEnded: true, msgTakeoverFail: true, msgStartFailed: true, msgBalance: true}
	for k := range actionMsgs {
		m[k] = true
	}
	return m
}()

func parseEvent(line []byte) (event, bool) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber() // wall_ns does not fit a float64 exactly
	if dec.Decode(&m) != nil {
		return event{}, false
	}
	msg, _ := m["msg"].(string)
	if !keptMsgs[msg] {
		return event{}, false
	}
	e := event{Msg: msg}
	e.Level, _ = m["level"].(string)
	if s, ok := m["ts"].(string); ok {
		e.TS, _ = time.Parse(time.RFC3339Nano, s)
	}
	e.Queue, _ = m["queue"].(string)
	e.RunID, _ = m["run_id"].(string)
	e.Prior, _ = m["prior_run_id"].(string)
	e.ServerID, _ = m["server_id"].(string)
	e.Err, _ = m["error"].(string)
	num := func(k string) (int64, bool) {
		n, ok := m[k].(json.Number)
		if !ok {
			return 0, false
		}
		v, err := n.Int64()
		return v, err == nil
	}
	e.Token, e.HasToken = num("token")
	e.WallNS, _ = num("wall_ns")
	e.Started, _ = num("started_wall_ns")
	return e, true
}

// startProc starts a demo worker and waits until it is ready.
func (d *Drill) startProc(ctx context.Context, slot int, id string, queues []string, endpoints []string, extraEnv ...string) (*proc, error) {
	ports, err := etcdtest.PickPorts(1)
	if err != nil {
		return nil, err
	}
	p := &proc{slot: slot, id: id, queues: queues, addr: "127.0.0.1:" + strconv.Itoa(ports[0]),
		logPath: filepath.Join(d.dir, id+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		return nil, err
	}
	p.cmd = exec.Command(d.bin, "run", "-server-id", id, "-http", p.addr)
	env := append(cleanEnv(),
		"BATON_PROJECT="+d.cfg.Project,
		"BATON_QUEUES="+strings.Join(queues, ","),
		"BATON_ETCD_ENDPOINTS="+strings.Join(endpoints, ","),
		"BATON_TEMPORAL_ADDRESS="+d.temporal.hostPort,
		"BATON_TEMPORAL_NAMESPACE="+d.temporal.namespace,
		"BATON_REDIS_ADDR="+d.redis.Addr(),
		"BATON_ELECTION_TTL="+d.cfg.TTL.String(),
		"BATON_HEARTBEAT_INTERVAL="+d.cfg.HeartbeatInterval.String(),
		"BATON_RECONCILE_INTERVAL="+d.cfg.ReconcileInterval.String(),
		"BATON_RECONCILE_STALE_AFTER="+d.cfg.StaleAfter.String(),
		"BATON_REGISTRY_HEARTBEAT_INTERVAL=1s",
		"BATON_SHUTDOWN_TIMEOUT=15s",
		"BATON_LOG_LEVEL=info",
	)
	if pw := d.redis.Password(); pw != "" {
		env = append(env, "BATON_REDIS_PASSWORD="+pw)
	}
	p.cmd.Env = append(env, extraEnv...)
	p.cmd.Stdout = logf
	// Its own process group: a Ctrl-C reaches the drill only, which then kills its workers itself.
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	p.started = time.Now()
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Bytes()
			_, _ = logf.Write(line)
			_, _ = logf.Write([]byte{'\n'})
			if e, ok := parseEvent(line); ok {
				p.mu.Lock()
				p.events = append(p.events, e)
				p.mu.Unlock()
			}
		}
	}()
	go func() {
		<-readerDone
		_ = p.cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.exitedAt, p.code = time.Now(), p.cmd.ProcessState.ExitCode()
		expected := p.expectExit
		p.mu.Unlock()
		close(p.done)
		if expected == "" && d.bg.Err() == nil {
			d.violate(Violation{Check: CheckUnexpectedExit, At: time.Now(),
				Detail: fmt.Sprintf("%s exited with code %d without a signal from the drill; log tail: %s", p.id, p.code, tailFile(p.logPath, 800))})
		}
	}()
	d.bgWG.Go(func() { d.poll(p) })

	deadline := time.Now().Add(45 * time.Second)
	for !readyz(p.addr) {
		select {
		case <-p.done:
			return p, fmt.Errorf("%s exited (code %d) before it was ready: %s", id, p.code, tailFile(p.logPath, 1500))
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return p, fmt.Errorf("%s not ready within 45s: %s", id, tailFile(p.logPath, 1500))
		}
	}
	return p, nil
}

// nextGen returns the generation the next incarnation of slot i will have.
func (d *Drill) nextGen(i int) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.gens[i]
}

// startSlot starts the next incarnation of worker slot i (a new server ID) behind its etcd proxies.
func (d *Drill) startSlot(ctx context.Context, i int) (*proc, error) {
	d.mu.Lock()
	gen := d.gens[i]
	d.gens[i]++
	d.mu.Unlock()
	var eps []string
	for _, px := range d.proxies[i] {
		eps = append(eps, px.URL())
	}
	p, err := d.startProc(ctx, i, fmt.Sprintf("w%d-%d", i+1, gen), d.queues, eps)
	if p != nil {
		d.mu.Lock()
		d.slots[i] = p
		d.mu.Unlock()
	}
	return p, err
}

var httpClient = &http.Client{Timeout: 800 * time.Millisecond}

func readyz(addr string) bool {
	resp, err := httpClient.Get("http://" + addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// status reads /status at addr.
func status(addr string) (baton.Status, bool) {
	resp, err := httpClient.Get("http://" + addr + "/status")
	if err != nil {
		return baton.Status{}, false
	}
	defer resp.Body.Close()
	var st baton.Status
	if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&st) != nil {
		return baton.Status{}, false
	}
	return st, true
}

func (p *proc) alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

func (p *proc) isStopped() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stopped
}

func (p *proc) signal(sig syscall.Signal) {
	if p.cmd.Process != nil {
		_ = p.cmd.Process.Signal(sig)
	}
}

// kill sends SIGKILL, records when, and waits for the exit (bounded).
func (p *proc) kill() time.Time {
	p.mu.Lock()
	p.expectExit = "SIGKILL"
	p.mu.Unlock()
	p.signal(syscall.SIGKILL)
	at := time.Now()
	p.mu.Lock()
	p.killedAt = at
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	return at
}

// term sends SIGTERM and records when.
func (p *proc) term() time.Time {
	p.mu.Lock()
	p.expectExit = "SIGTERM"
	p.termAt = time.Now()
	at := p.termAt
	p.mu.Unlock()
	p.signal(syscall.SIGTERM)
	return at
}

// stop sends SIGSTOP; the instant recorded is after the signal was sent.
func (p *proc) stop() time.Time {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.signal(syscall.SIGSTOP)
	at := time.Now()
	p.mu.Lock()
	p.stops = append(p.stops, stopWindow{Stop: at})
	p.mu.Unlock()
	return at
}

// cont sends SIGCONT; the instant recorded is before the signal was sent.
func (p *proc) cont() time.Time {
	at := time.Now()
	p.mu.Lock()
	p.stopped = false
	if n := len(p.stops); n > 0 && p.stops[n-1].Resume.IsZero() {
		p.stops[n-1].Resume = at
	}
	p.mu.Unlock()
	p.signal(syscall.SIGCONT)
	return at
}

// forceKill ends the process at once (teardown).
func (p *proc) forceKill() {
	if !p.alive() {
		return
	}
	p.mu.Lock()
	if p.expectExit == "" {
		p.expectExit = "teardown"
	}
	p.mu.Unlock()
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

func (p *proc) snapshotEvents() []event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]event(nil), p.events...)
}

func (p *proc) lastSample() (sample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, p.lastOK
}

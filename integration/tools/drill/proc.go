package drill

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// proc is one demo-worker process, with what the drill did to it and read from it.
type proc struct {
	*workerproc.Proc
	slot int // worker slot, -1 for an orphan fault's solo worker
	id   string
	done chan struct{} // closed once the exit is recorded

	mu       sync.Mutex
	events   []event.Event
	expected bool      // the drill sent SIGKILL or SIGTERM, or tore it down
	killedAt time.Time // SIGKILL sent
	termAt   time.Time // SIGTERM sent
	exitedAt time.Time
	stops    []stopWindow // the last one without Resume while SIGSTOPped
	last     sample       // zero before the first answered read
}

type stopWindow struct {
	Stop, Resume time.Time // Resume zero while stopped
}

// sample is one /status read: the process answered st at some instant in [Sent, Recv].
type sample struct {
	Sent, Recv time.Time
	St         baton.Status
}

// actionKinds are the events that show a process acting for a term (its token): a SIGSTOPped
// process must emit none of them for a term it held when it was stopped once it is resumed.
var actionKinds = map[event.Kind]bool{event.TakenOver: true, event.PriorTerminated: true, event.SteppedDown: true,
	event.HeartbeatRefused: true, event.HeartbeatFailed: true, event.HeartbeatRecovered: true,
	event.StaleRunTerminated: true, event.StaleRunClosed: true, event.WorkerEvicted: true}

// startProc starts a demo worker, its log in the drill's directory, and waits until it is ready.
func (d *Drill) startProc(ctx context.Context, slot int, id string, queues []string, endpoints []string, extraEnv ...string) (*proc, error) {
	p := &proc{slot: slot, id: id, done: make(chan struct{})}
	env := append(d.clientEnv(endpoints),
		"BATON_QUEUES="+strings.Join(queues, ","),
		"BATON_ELECTION_TTL="+d.cfg.TTL.String(),
		"BATON_HEARTBEAT_INTERVAL="+d.cfg.HeartbeatInterval.String(),
		"BATON_RECONCILE_INTERVAL="+d.cfg.ReconcileInterval.String(),
		"BATON_RECONCILE_STALE_AFTER="+d.cfg.StaleAfter.String(),
		"BATON_REGISTRY_HEARTBEAT_INTERVAL=1s",
		"BATON_LOG_LEVEL=info",
	)
	wp, err := workerproc.Start(workerproc.Options{LogFile: filepath.Join(d.dir, id+".log"), OnLine: func(line []byte) { d.onLine(p, line) }},
		d.bin, id, append(env, extraEnv...))
	if err != nil {
		return nil, err
	}
	p.Proc = wp
	d.mu.Lock()
	d.procs = append(d.procs, p)
	d.mu.Unlock()
	d.bgWG.Go(func() {
		<-p.Done()
		p.mu.Lock()
		p.exitedAt = time.Now()
		expected := p.expected
		p.mu.Unlock()
		close(p.done)
		if !expected && d.bg.Err() == nil {
			d.violate(Violation{Check: CheckUnexpectedExit, At: time.Now(),
				Detail: fmt.Sprintf("%s exited with code %d without a signal from the drill; log tail: %s", p.id, p.Code(), p.Tail(800))})
		}
	})
	d.bgWG.Go(func() { d.poll(p) })
	return p, p.WaitReady(ctx, 45*time.Second)
}

// clientEnv is the environment every process of the drill gets: its project and the servers.
func (d *Drill) clientEnv(etcd []string) []string {
	env := []string{"BATON_PROJECT=" + d.cfg.Project, "BATON_ETCD_ENDPOINTS=" + strings.Join(etcd, ","),
		"BATON_TEMPORAL_ADDRESS=" + d.temporal.HostPort(), "BATON_TEMPORAL_NAMESPACE=" + d.temporal.Namespace(),
		"BATON_REDIS_ADDR=" + d.redis.Addr()}
	if pw := d.redis.Password(); pw != "" {
		env = append(env, "BATON_REDIS_PASSWORD="+pw)
	}
	return env
}

// onLine keeps p's events of interest (its JSON lines with an "event" field), and counts the
// load's handler runs.
func (d *Drill) onLine(p *proc, line []byte) {
	var e event.Event
	if json.Unmarshal(line, &e) != nil || e.Kind == "" {
		return
	}
	switch {
	case e.Kind == event.HandlerRan && e.DispatchKey != "":
		d.mu.Lock()
		d.handlerRuns[e.DispatchKey]++
		d.mu.Unlock()
	case actionKinds[e.Kind] || e.Kind == event.TermStarted || e.Kind == event.TermEnded || e.Kind == event.HandingOver:
		p.mu.Lock()
		p.events = append(p.events, e)
		p.mu.Unlock()
	}
}

// startSlot starts the next incarnation of worker slot i (a new server ID) behind its etcd proxies.
func (d *Drill) startSlot(ctx context.Context, i int) (*proc, error) {
	var eps []string
	for _, px := range d.proxies[i] {
		eps = append(eps, px.URL())
	}
	return d.startProc(ctx, i, fmt.Sprintf("w%d-%d", i+1, len(d.incarnations(i))), d.queues, eps)
}

// incarnations are the processes slot i has started so far, oldest first.
func (d *Drill) incarnations(i int) []*proc {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []*proc
	for _, p := range d.procs {
		if p.slot == i {
			out = append(out, p)
		}
	}
	return out
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
	n := len(p.stops)
	return n > 0 && p.stops[n-1].Resume.IsZero()
}

// send sends sig and records it, with the instant that bounds the process's acts: taken after a
// SIGKILL or SIGSTOP is sent (from then on it surely does nothing), before a SIGTERM or SIGCONT
// (until then it surely did nothing new). After a SIGKILL it waits for the exit.
func (p *proc) send(sig syscall.Signal) time.Time {
	p.mu.Lock()
	at := time.Now()
	switch sig {
	case syscall.SIGKILL:
		p.expected = true
	case syscall.SIGTERM:
		p.expected, p.termAt = true, at
	case syscall.SIGSTOP:
		p.stops = append(p.stops, stopWindow{}) // its Stop is the instant after the signal
	case syscall.SIGCONT:
		if n := len(p.stops); n > 0 && p.stops[n-1].Resume.IsZero() {
			p.stops[n-1].Resume = at
		}
	}
	p.mu.Unlock()
	p.Signal(sig)
	if sig != syscall.SIGKILL && sig != syscall.SIGSTOP {
		return at
	}
	at = time.Now()
	p.mu.Lock()
	if sig == syscall.SIGKILL {
		p.killedAt = at
	} else {
		p.stops[len(p.stops)-1].Stop = at
	}
	p.mu.Unlock()
	if sig == syscall.SIGKILL {
		p.Kill()
	}
	return at
}

// teardownKill ends the process at once.
func (p *proc) teardownKill() {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
	p.Kill()
}

// read reads p's /status now; false while p cannot answer.
func (p *proc) read() (sample, bool) {
	sent := time.Now()
	st, ok := workerproc.Status(p.Addr)
	return sample{Sent: sent, Recv: time.Now(), St: st}, ok
}

func (p *proc) snapshotEvents() []event.Event {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]event.Event(nil), p.events...)
}

func (p *proc) lastSample() (sample, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.last, !p.last.Recv.IsZero()
}

package sim_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/converter"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/sim"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	"github.com/baton-run/baton/integration/sim/temporalmodel"
	"github.com/baton-run/baton/takeover"
)

// stream is the seed's random stream of one name (sim.Streams): every source of randomness in a
// world is one of these, so adding a draw to one stream never shifts another.
func stream(seed uint64, name string) *rand.Rand { return sim.Streams{Seed: seed}.Rand(name) }

// The probes: rare events a batch must hit, or it has stopped exploring.
const (
	probeLateStart      = "late start landed while no run was open"
	probeAlreadyStarted = "AlreadyStarted"
	probeWrongRun       = "terminate refused as the wrong run"
	probeLostResponse   = "lost response whose effect applied"
	probeChainRefused   = "terminate by chain refused: the current run is another chain's"
)

var takeoverProbes = []string{probeLateStart, probeAlreadyStarted, probeWrongRun, probeLostResponse, probeChainRefused,
	probeRunLogged, probePriorLogged, probeStepDownLogged}

// world is one schedule: the model, the etcd holder of the queue's term, the trace, the checks.
type world struct {
	seed  uint64
	start time.Time
	model *temporalmodel.Model
	wfIDs []string       // by queue
	queue map[string]int // queue by workflow ID
	dc    converter.DataConverter

	mu         sync.Mutex
	holder     map[int]int64 // the token etcd holds for each queue (none: 0)
	healed     bool
	trace      []string
	lanes      map[string][]string
	violations []string
	probes     map[string]int
	runs       map[int64]takeover.Run // the run each term's owner loop follows, by token

	// etcd holds the run log, when the seed has one (newRunLogModel).
	etcd *etcdmodel.Model
	// steppingDown: the term's owner loop has returned and its step-down is under way, by token.
	steppingDown map[int64]bool
}

func newWorld(seed uint64, queues int) *world {
	w := &world{seed: seed, start: time.Now(), dc: converter.GetDefaultDataConverter(), holder: map[int]int64{},
		queue:  map[string]int{},
		probes: map[string]int{}, lanes: map[string][]string{}, runs: map[int64]takeover.Run{},
		steppingDown: map[int64]bool{}}
	w.model = temporalmodel.New(temporalmodel.Options{Clock: sim.Streams{Seed: seed}.NewClock("model")})
	for q := range queues {
		id, err := takeover.WorkflowID("sim", queueName(q))
		if err != nil {
			panic(err)
		}
		w.wfIDs = append(w.wfIDs, id)
		w.queue[id] = q
	}
	return w
}

// logf adds a line to the trace, stamped with the simulated time since the start. who is the process
// and term ("p1/t107"), or "world".
func (w *world) logf(who, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.logLocked(who, format, args...)
}

func (w *world) logLocked(who, format string, args ...any) {
	line := fmt.Sprintf("%12.6fs %-9s %s", time.Since(w.start).Seconds(), who, fmt.Sprintf(format, args...))
	w.trace = append(w.trace, line)
	// A term's label is "p<process>/t<token>": its process's lane holds every term it had.
	lane, _, _ := strings.Cut(who, "/")
	w.lanes[lane] = append(w.lanes[lane], line)
}

func (w *world) violate(who, format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.violateLocked(who, format, args...)
}

func (w *world) violateLocked(who, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	w.logLocked(who, "VIOLATION: %s", msg)
	w.violations = append(w.violations, fmt.Sprintf("%.6fs %s: %s", time.Since(w.start).Seconds(), who, msg))
}

// result is what the schedule reports to its batch; the trace's fingerprint is the first 8 bytes
// of its SHA-256.
func (w *world) result() sim.Result {
	w.mu.Lock()
	defer w.mu.Unlock()
	timeline := strings.Join(w.trace, "\n")
	sum := sha256.Sum256([]byte(timeline))
	lanes := make(map[string]string, len(w.lanes))
	for lane, lines := range w.lanes {
		lanes[lane] = strings.Join(lines, "\n")
	}
	return sim.Result{Seed: w.seed, Violations: w.violations, Probes: w.probes, Timeline: timeline, Lanes: lanes,
		Hash: binary.BigEndian.Uint64(sum[:8]), Simulated: time.Since(w.start)}
}

// tokenOf is the owner token in a run's memo (0 without one).
func (w *world) tokenOf(r temporalmodel.Run) int64 {
	owner, _, err := takeover.DecodeOwner(w.dc, r.Memo)
	if err != nil {
		return -1
	}
	return owner.Token
}

// fault is what the network does to one request.
type fault struct {
	delay        time.Duration
	dropBefore   bool // never applied; the caller sees Unavailable
	dropResponse bool // applied; the caller sees Unavailable
	duplicate    time.Duration
}

// faultRates is a seed's mix: each kind on or off, at its own rate.
type faultRates struct {
	delay, dropBefore, dropResponse, duplicate float64
	maxDelay                                   time.Duration
}

func drawRates(r *rand.Rand) faultRates {
	on := func() float64 {
		if r.IntN(10) < 6 {
			return 0.05 + 0.3*r.Float64()
		}
		return 0
	}
	return faultRates{delay: on(), dropBefore: on(), dropResponse: on(), duplicate: on(),
		maxDelay: time.Duration(500+r.IntN(11500)) * time.Millisecond}
}

// draw is the fault of one request: always a small seeded latency (so that no two deliveries fall
// on the same instant), more when the seed says so, nothing else once the world is healed.
func (w *world) draw(r *rand.Rand, rates faultRates) fault {
	f := fault{delay: time.Millisecond + time.Duration(r.Int64N(int64(time.Millisecond)))}
	w.mu.Lock()
	healed := w.healed
	w.mu.Unlock()
	if healed {
		return f
	}
	if r.Float64() < rates.delay {
		f.delay += time.Duration(r.Int64N(int64(rates.maxDelay)))
	}
	f.dropBefore = r.Float64() < rates.dropBefore
	f.dropResponse = !f.dropBefore && r.Float64() < rates.dropResponse
	if !f.dropBefore && r.Float64() < rates.duplicate {
		f.duplicate = time.Millisecond + time.Duration(r.Int64N(int64(rates.maxDelay)))
	}
	return f
}

type reply struct {
	v   any
	err error
}

// sender is the network between one term's Manager and the model: every request gets its fault,
// is checked when sent and when applied, and is delivered by a timer of its own, so that a request
// the caller gave up on still lands later (a superseded leader's late start).
func (w *world) sender(who string, token int64, r *rand.Rand, rates faultRates) temporalmodel.Sender {
	var mu sync.Mutex
	return func(ctx context.Context, req temporalmodel.Request) (any, error) {
		w.checkSent(who, req)
		mu.Lock()
		f := w.draw(r, rates)
		mu.Unlock()
		out := make(chan reply, 1)
		time.AfterFunc(f.delay, func() {
			if f.dropBefore {
				w.logf(who, "%s dropped before the service", describeReq(req))
				out <- reply{err: serviceerror.NewUnavailable("sim: request lost")}
				return
			}
			v, err := w.apply(who, token, req, f.dropResponse, false)
			if f.dropResponse {
				v, err = nil, serviceerror.NewUnavailable("sim: response lost")
			}
			out <- reply{v, err}
		})
		if f.duplicate > 0 {
			time.AfterFunc(f.delay+f.duplicate, func() { w.apply(who, token, req, false, true) })
		}
		select {
		case rep := <-out:
			return rep.v, rep.err
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// checkSent holds the invariant on requests as they leave: every terminate names a run ID or a
// chain (FirstExecutionRunId), never "" (the current run, whoever's it is).
func (w *world) checkSent(who string, req temporalmodel.Request) {
	if req.Verb == temporalmodel.VerbTerminate && req.Terminate.RunID == "" && req.Terminate.FirstRunID == "" {
		w.violate(who, "terminate of %s names no run (neither run ID nor first execution run ID)", req.Terminate.WorkflowID)
	}
}

func describeReq(req temporalmodel.Request) string {
	switch req.Verb {
	case temporalmodel.VerbStart:
		if req.Start.Signal != "" {
			return fmt.Sprintf("signal-with-start(req %s, conflict %v)", req.Start.RequestID, req.Start.Conflict)
		}
		return fmt.Sprintf("start(req %s, conflict %v)", req.Start.RequestID, req.Start.Conflict)
	case temporalmodel.VerbTerminate:
		return fmt.Sprintf("terminate(run %q, chain %q)", short(req.Terminate.RunID), short(req.Terminate.FirstRunID))
	case temporalmodel.VerbDescribe:
		return fmt.Sprintf("describe(run %q)", short(req.Describe[1]))
	}
	return string(req.Verb)
}

// short is a model run ID's counter, enough for a reader.
func short(runID string) string {
	if i := strings.LastIndexByte(runID, '-'); i >= 0 {
		return "#" + strings.TrimLeft(runID[i+1:], "0")
	}
	return runID
}

// apply delivers req to the model and holds the invariants on its effect: a run is never closed by
// a request whose sender's token is lower than the run's owner's. It feeds the probes.
func (w *world) apply(who string, token int64, req temporalmodel.Request, lost, dup bool) (any, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	id := req.WorkflowID()
	before, wasOpen := w.model.Open(id)
	v, err := w.model.Apply(req)
	after, isOpen := w.model.Open(id)
	tag := ""
	if dup {
		tag = " (duplicate)"
	}
	if lost {
		tag += " (response lost)"
	}
	w.logLocked(who, "%s%s -> %s", describeReq(req), tag, answer(v, err))
	closed := wasOpen && (!isOpen || after.RunID != before.RunID)
	started := isOpen && (!wasOpen || after.RunID != before.RunID) && req.Verb == temporalmodel.VerbStart
	if closed {
		if owner := w.tokenOf(before); owner > token {
			w.violateLocked(who, "run %s of token %d closed by a %s of token %d", short(before.RunID), owner, req.Verb, token)
		}
	}
	if started && !wasOpen && token < w.holder[w.queue[id]] {
		w.probes[probeLateStart]++
	}
	if temporalmodel.AsAlreadyStarted(err) != nil {
		w.probes[probeAlreadyStarted]++
	}
	var nf *serviceerror.NotFound
	if req.Verb == temporalmodel.VerbTerminate && errors.As(err, &nf) && wasOpen {
		w.probes[probeWrongRun]++
		if req.Terminate.FirstRunID != "" && before.FirstRunID != req.Terminate.FirstRunID {
			w.probes[probeChainRefused]++
		}
	}
	if lost && (closed || started) {
		w.probes[probeLostResponse]++
	}
	return v, err
}

func answer(v any, err error) string {
	if err != nil {
		return fmt.Sprintf("%T", err)
	}
	switch v := v.(type) {
	case temporalmodel.StartResponse:
		return fmt.Sprintf("run %s started=%v", short(v.RunID), v.Started)
	case *workflowservice.DescribeWorkflowExecutionResponse:
		i := v.GetWorkflowExecutionInfo()
		return fmt.Sprintf("run %s %v", short(i.GetExecution().GetRunId()), i.GetStatus())
	}
	return "ok"
}

// term is a modelled election term: its token is the create revision of its key; Check fails once
// its process knows it lost (its context ends), Confirm asks "etcd" (the world's holder), and may
// pause the process on the way back (a stalled process whose answer is stale when it resumes).
type term struct {
	w       *world
	proc    int
	queue   int
	token   int64
	started time.Time
	ctx     context.Context
	cancel  context.CancelCauseFunc
	pauses  *rand.Rand
	pauseP  float64
	// unavailP is how often etcd does not answer a Confirm before the heal.
	unavailP float64
	mu       sync.Mutex
	// The owner loop runs on loop, which a graceful step-down stops (as a Node stops its loops)
	// before the term ends; done is closed when the loop has returned.
	mgr      *takeover.Manager
	loop     context.Context
	stopLoop context.CancelFunc
	done     chan struct{}
}

var (
	errTermEnded       = errors.New("sim: term ended")
	errEtcdUnavailable = errors.New("sim: etcd did not answer")
)

func (t *term) Project() string  { return sim.Project }
func (t *term) Queue() string    { return queueName(t.queue) }
func (t *term) LeaderID() string { return fmt.Sprintf("p%d", t.proc) }

// Key is the term's candidate key in election's layout, the token standing in for the lease ID.
func (t *term) Key() string {
	return election.Keys{Prefix: election.DefaultConfig().Prefix}.Candidates(sim.Project, t.Queue()) + fmt.Sprintf("%016x", t.token)
}

func (t *term) Token() int64             { return t.token }
func (t *term) Started() time.Time       { return t.started }
func (t *term) Context() context.Context { return t.ctx }
func (t *term) who() string              { return fmt.Sprintf("p%d/t%d", t.proc, t.token) }

func (t *term) Check() error {
	if t.ctx.Err() != nil {
		return fmt.Errorf("%w: %w", election.ErrNotLeader, context.Cause(t.ctx))
	}
	return nil
}

func (t *term) Confirm(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	unavailable := t.pauses.Float64() < t.unavailP
	t.mu.Unlock()
	t.w.mu.Lock()
	holder, healed := t.w.holder[t.queue], t.w.healed
	t.w.mu.Unlock()
	if unavailable && !healed {
		// etcd did not answer: neither superseded nor confirmed (the takeover keeps a run it started).
		return errEtcdUnavailable
	}
	if holder != t.token {
		return fmt.Errorf("%w: etcd holds token %d", election.ErrNotLeader, holder)
	}
	t.mu.Lock()
	pause := t.pauses.Float64() < t.pauseP
	d := time.Duration(t.pauses.Int64N(int64(3 * time.Second)))
	t.mu.Unlock()
	if pause {
		// The process stalls after etcd answered: the answer it returns may be stale when it resumes.
		time.Sleep(d)
	}
	return nil
}

var _ takeover.Term = (*term)(nil)

func queueName(q int) string { return fmt.Sprintf("q%d", q) }

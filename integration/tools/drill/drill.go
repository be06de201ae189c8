// Package drill is Baton's chaos drill (`make drill`, the command integration/tools/cmd/drill, and a short
// version in this package's test): real servers on loopback (a 3-member etcd, a Temporal server,
// redis-server), N demo-worker processes over M queues, faults injected one at a time with settle
// periods, and checks of Baton's invariants against the servers' own records and the workers'
// /status and logs.
//
// # Faults
//
// Each fault is made of steps; every step is an injection instant after which the drill waits for
// the fleet to settle (every queue led by exactly one worker whose dispatcher run is open in
// Temporal and named by its Redis heartbeat key). The kinds, cycled in a seeded order:
//
//	sigkill           SIGKILL of a worker that leads queues; later a new incarnation (new server ID)
//	sigterm           SIGTERM of a worker that leads queues (a clean stop); later a new incarnation
//	sigstop           SIGSTOP of a leader for longer than the TTL, then SIGCONT
//	partition         the worker's connections to etcd blackholed (its own proxies), then healed
//	rolling           SIGTERM of every worker in turn, each replaced by a new incarnation
//	etcd-member       an etcd member killed (the raft leader every other time) and restarted
//	redis-restart     redis-server stopped (SIGTERM or SIGKILL, alternately) and started on its port
//	temporal-restart  the Temporal server stopped (SIGTERM or SIGKILL, alternately) and restarted
//	orphan            a worker that alone serves a queue of its own is SIGKILLed: its run and
//	                  heartbeat key are orphans that only the reconciler can clean up
//
// # Checks
//
// Each violation names its check (the Check* constants). Live, while faults run:
//
//   - settle after every step (waitSteady): within TakeoverSLA every queue is led by exactly one
//     worker (/status) whose run is the workflow's current, Running run in Temporal, named with the
//     leader's token by its heartbeat key, and the only Running run visibility lists
//     (owner-within-sla, one-open-run; a queue that does not settle is reported with its etcd
//     candidate keys).
//   - /status samples every PollInterval: two workers seen leading one queue at the same instant
//     (checkSample says what that can mean between samples) (one-owner).
//   - orphans every second: an open run or heartbeat key that is not the live leader's must be gone
//     within CleanupSLA (orphan-cleanup); the orphan fault times the reconciler.
//   - every worker exit must follow the drill's SIGKILL or SIGTERM (unexpected-exit), and a SIGTERM
//     must end in exit code 0 (unclean-stop).
//
// After the faults, from the records (analyze):
//
//   - terms from the workers' "leadership started/ended" logs: per election no two terms overlap
//     (one-owner) and later terms carry higher tokens (token-order); buildTerms says where a
//     SIGKILLed or SIGSTOPped worker's terms end (stopped-process-acted).
//   - runs from Temporal's mutable state: the runs of one workflow ID never overlap in time
//     (one-open-run); every run belongs to a logged term and starts before any successor term; every
//     termination is Baton's run-scoped one with a reason and token that fit (fenced-action,
//     run-records).
//   - per step, each queue whose leadership changed got exactly one new run (accountSteps)
//     (one-new-run-per-affected-queue); the takeover latency is from the injection to its start.
//
// With LoadRate set, a producer sends dispatch requests through all of it and the dispatch ledger
// says what became of each one Temporal accepted (load-lost, load-double, load-pending): see
// load.go.
//
// # Measured: issue #13's chaos proof
//
// 3 workers over 2 queues, TTL 3 s, a fire-and-forget producer (SignalWorkflow, a failed send
// retried until accepted) at 10 requests/s per queue, 5 minutes of faults one after another
// (SIGKILL and SIGTERM of a leader, SIGSTOP of a leader past the TTL, rolling SIGTERM restarts of
// every worker, etcd member kills on the 3-member etcd, the raft leader every other time), on this
// 2-core machine, binaries built without the race detector:
//
//	go run ./tools/cmd/drill -workers 3 -queues 2 -ttl 3s -load-rate 10 -load-queues 2 -seed 13 \
//	    -faults sigkill,sigterm,rolling,sigstop,etcd-member -duration 5m
//
//	faults  accepted  handled  lost  double  pending  handler re-runs  send -> handled p50 / p99 / max
//	41      6,149     6,149    0     0       0        0                225 ms / 9.16 s / 14.77 s
//
// (8 SIGKILL, 8 SIGTERM, 8 SIGSTOP, 9 rolling restarts, 8 etcd member kills; 44 sends retried across
// handover gaps; the ledger showed every request done 2 s after the last send; no violation of any
// other check.) The same drill against the demo worker of the commit before the carry-over
// (f1d9796^, which dropped what a terminated run had accepted; today's producer: -bin old
// -load-bin new, -faults sigkill,sigterm -duration 1m, 6 of each) fails with load-lost: 1,341
// accepted, 675 handled, 666 lost (50 %: the old dispatcher handled one request at a time, so each
// takeover's terminate dropped a backlog), 0 double, 0 pending, and no other violation.
package drill

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/stack"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/integration/servers/workerproc"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds.
const (
	KindSIGKILL         Kind = "sigkill"
	KindSIGTERM         Kind = "sigterm"
	KindSIGSTOP         Kind = "sigstop"
	KindPartition       Kind = "partition"
	KindRolling         Kind = "rolling"
	KindEtcdMember      Kind = "etcd-member"
	KindRedisRestart    Kind = "redis-restart"
	KindTemporalRestart Kind = "temporal-restart"
	KindOrphan          Kind = "orphan"
)

// AllKinds lists every fault kind in its default order.
var AllKinds = []Kind{KindSIGKILL, KindSIGTERM, KindSIGSTOP, KindPartition, KindRolling, KindEtcdMember, KindRedisRestart,
	KindTemporalRestart, KindOrphan}

// ParseKinds parses a comma-separated list of kinds ("all" or empty: every kind).
func ParseKinds(s string) ([]Kind, error) {
	if s = strings.TrimSpace(s); s == "" || s == "all" {
		return append([]Kind(nil), AllKinds...), nil
	}
	var out []Kind
	for _, f := range strings.Split(s, ",") {
		k := Kind(strings.TrimSpace(f))
		if !slices.Contains(AllKinds, k) {
			return nil, fmt.Errorf("unknown fault kind %q (kinds: %v)", k, AllKinds)
		}
		out = append(out, k)
	}
	return out, nil
}

// Config tunes a drill. The zero value of a field means its default. The report shows it.
type Config struct {
	Workers int    `json:"workers"` // demo-worker processes; default 5
	Queues  int    `json:"queues"`  // queues, q00.., all served by every worker; default 20
	Project string `json:"project"` // default "drill"
	Seed    uint64 `json:"seed"`    // fault order and targets; 0: from the clock
	// TTL is the election lease TTL of the workers; default 2s (whole seconds).
	TTL time.Duration `json:"ttl_ns"`
	// Duration bounds the fault phase: a new fault starts only while it has not passed. Default 5m.
	Duration time.Duration `json:"fault_phase_ns"`
	// Cycles, when positive, ends the fault phase after that many rounds of every kind.
	Cycles int `json:"cycles,omitempty"`
	// Kinds are the fault kinds to inject; default AllKinds. Kinds that need control of a server
	// given by BATON_* variables (external) are skipped and listed in the report.
	Kinds []Kind `json:"kinds"`
	// Settle is the pause after the fleet settled before the next step; default 2s.
	Settle time.Duration `json:"settle_ns"`
	// TakeoverSLA bounds the wait for every queue to be owned again after a step; default 30s (the
	// PRD's p95 takeover target).
	TakeoverSLA time.Duration `json:"takeover_sla_ns"`
	// CleanupSLA bounds how long an orphaned run or heartbeat key may live; default 2m (the PRD's).
	CleanupSLA time.Duration `json:"cleanup_sla_ns"`
	// The workers' heartbeat and reconciler settings; defaults 1s, 6s and 10s.
	HeartbeatInterval time.Duration `json:"heartbeat_interval_ns"`
	StaleAfter        time.Duration `json:"stale_after_ns"`
	ReconcileInterval time.Duration `json:"reconcile_interval_ns"`
	// LoadRate, when positive, runs the load phase: that many dispatch requests per second per loaded
	// queue, sent with SignalWorkflow while the faults run; 0: no load.
	LoadRate float64 `json:"load_rate"`
	// LoadQueues is how many of the queues (the first ones) get the load; default all.
	LoadQueues int `json:"load_queues"`
	// LoadBin is the demo-worker binary that runs `load` (or a directory holding it); default the
	// workers' binary. A drill of an older worker build uses today's producer this way.
	LoadBin string `json:"load_bin,omitempty"`
	// LoadSettle bounds, after the last send, the wait for the ledger to show every accepted request
	// handled and no record pending; default 60s.
	LoadSettle time.Duration `json:"load_settle_ns"`
	// PollInterval is the period of each worker's /status poll; default 150ms.
	PollInterval time.Duration `json:"poll_interval_ns"`
	// Bin is the demo-worker binary (or a directory holding it); empty: built into the work dir.
	Bin string `json:"bin,omitempty"`
	// LogDir keeps the logs of every process there; empty: a temporary directory, removed at the end
	// unless the drill found a violation.
	LogDir string `json:"-"`
	// Out receives progress lines; default io.Discard.
	Out io.Writer `json:"-"`
}

// DefaultConfig is the configuration with every default filled in (Seed from the clock).
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	orDefault(&c.Workers, 5)
	orDefault(&c.Queues, 20)
	c.Project = cmp.Or(c.Project, "drill")
	if c.Seed == 0 {
		c.Seed = uint64(time.Now().UnixNano())
	}
	orDefault(&c.TTL, 2*time.Second)
	c.TTL = c.TTL.Round(time.Second)
	orDefault(&c.Duration, 5*time.Minute)
	orDefault(&c.Settle, 2*time.Second)
	orDefault(&c.TakeoverSLA, 30*time.Second)
	orDefault(&c.CleanupSLA, 2*time.Minute)
	orDefault(&c.HeartbeatInterval, time.Second)
	orDefault(&c.StaleAfter, 6*time.Second)
	orDefault(&c.ReconcileInterval, 10*time.Second)
	orDefault(&c.PollInterval, 150*time.Millisecond)
	orDefault(&c.LoadSettle, time.Minute)
	if len(c.Kinds) == 0 {
		c.Kinds = append([]Kind(nil), AllKinds...)
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	return c
}

// orDefault sets *v to def unless it is positive.
func orDefault[T int | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Drill is one run.
type Drill struct {
	cfg     Config
	started time.Time
	rng     *rand.Rand
	plan
	servers
	observer
}

// plan is what the drill runs: its queues and the fault kinds this machine can inject.
type plan struct {
	queues  []string
	kinds   []Kind   // the fault kinds that can run here
	skipped []string // the kinds that cannot, and why
}

// servers is the drill's stack: the servers it started, the clients it judges them with, and the
// demo worker binary and the directory of its logs.
type servers struct {
	dir     string // logs and the Temporal database
	tempDir bool   // dir is ours to remove
	bin     string

	stack    *stack.Stack
	etcd     *etcdx.Cluster
	proxies  [][]*etcdx.Proxy // per worker slot, one per etcd endpoint
	redis    *redisx.Server
	temporal *temporalx.Server // restarted by its fault unless External
	tc       client.Client
	rdb      *redis.Client
	ec       *clientv3.Client
}

// observer is what the drill saw while it ran: the processes, faults and steps, the live checks'
// counts and violations, and the load's; the analysis (analyze.go) reads it at the end.
type observer struct {
	bg       context.Context // the observers' context
	bgCancel context.CancelFunc
	bgWG     sync.WaitGroup

	mu         sync.Mutex
	procs      []*proc // every process ever started
	faults     []*Fault
	steps      []*Step
	violations []Violation
	checks     CheckStats           // the live counts; analyze adds the terms and runs
	monitoring atomic.Bool          // the fault phase runs: orphans are watched
	stuck      map[string]time.Time // queues reported without an owner, until they have one again
	load       *loadPhase           // nil without LoadRate
	loadStats  *LoadStats
	// handlerRuns counts, per dispatch key, the demo handler's runs the workers logged ("dispatched").
	handlerRuns map[string]int
}

// Run runs a drill and returns its report. An error means the drill could not run (a server did not
// start, the context ended); violations of Baton's invariants are in the report, not errors.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	cfg = cfg.withDefaults()
	d := &Drill{cfg: cfg, started: time.Now(), rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)),
		observer: observer{stuck: map[string]time.Time{}, handlerRuns: map[string]int{}}}
	for i := range cfg.Queues {
		d.queues = append(d.queues, fmt.Sprintf("q%02d", i))
	}
	d.bg, d.bgCancel = context.WithCancel(context.WithoutCancel(ctx))
	// go-redis logs its pool's dial failures (a Redis restart fault) through a process-wide logger.
	redis.SetLogger(quietRedis{})
	defer d.teardown()
	if err := d.setup(ctx); err != nil {
		return nil, err
	}
	if cfg.LoadRate > 0 {
		if err := d.startLoad(ctx); err != nil {
			return nil, err
		}
	}
	d.faultPhase(ctx)
	if d.load != nil && ctx.Err() == nil {
		d.endLoad(ctx)
	}
	if ctx.Err() == nil {
		d.finish(ctx)
	}
	if err := ctx.Err(); err != nil {
		return d.report(false), fmt.Errorf("drill interrupted: %w", err)
	}
	return d.report(true), nil
}

func (d *Drill) logf(format string, args ...any) {
	fmt.Fprintf(d.cfg.Out, "[%6.1fs] %s\n", time.Since(d.started).Seconds(), fmt.Sprintf(format, args...))
}

func (d *Drill) setup(ctx context.Context) error {
	var err error
	if d.dir, d.tempDir = d.cfg.LogDir, d.cfg.LogDir == ""; d.tempDir {
		d.dir, err = os.MkdirTemp("", "baton-drill-")
	} else {
		err = os.MkdirAll(d.dir, 0o755)
	}
	if err != nil {
		return err
	}
	d.logf("drill: %d workers × %d queues, project %q, TTL %v, seed %d, logs in %s", d.cfg.Workers, d.cfg.Queues,
		d.cfg.Project, d.cfg.TTL, d.cfg.Seed, d.dir)

	began := time.Now()
	if d.cfg.Bin != "" {
		d.bin, err = binPath(d.cfg.Bin)
	} else if d.bin, err = workerproc.Build(); err == nil {
		d.logf("built demo-worker in %v", time.Since(began).Round(100*time.Millisecond))
	}
	if err != nil {
		return err
	}

	began = time.Now()
	d.stack, err = stack.Start(ctx, stack.Options{EtcdMembers: 3, Redis: stack.RedisReal, RedisAppendOnly: true, Dir: d.dir,
		Temporal: func(ctx context.Context, _ string) (stack.Temporal, error) {
			ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
			defer cancel()
			t, err := temporalx.StartServerContext(ctx, temporalx.Options{Namespace: "default", Dir: d.dir,
				LogFile: filepath.Join(d.dir, "temporal.log"), DynamicConfig: map[string]any{
					// The drill reads visibility several times a second; the default is 10 per second.
					"frontend.namespaceRPS.visibility":        1000,
					"frontend.namespaceBurstRatio.visibility": 1,
				}})
			if err != nil {
				return nil, err
			}
			d.temporal = t
			return t, nil
		}})
	if err != nil {
		return err
	}
	d.etcd, d.redis = d.stack.Etcd, d.stack.Redis
	if d.tc, err = d.temporal.NewClient(); err != nil {
		return fmt.Errorf("temporal client: %w", err)
	}
	d.rdb = d.redis.NewClient()
	if d.ec, err = d.etcd.NewClient(); err != nil {
		return fmt.Errorf("etcd client: %w", err)
	}
	d.logf("servers up in %v: etcd %s (external %v), Temporal %s (external %v), Redis %s (external %v)",
		time.Since(began).Round(100*time.Millisecond), strings.Join(d.etcd.Endpoints(), ","), d.etcd.External(),
		d.temporal.HostPort(), d.temporal.External(), d.redis.Addr(), d.redis.External())

	for _, k := range d.cfg.Kinds {
		switch {
		case k == KindEtcdMember && d.etcd.External():
			d.skipped = append(d.skipped, string(k)+": etcd is external ("+etcdx.EnvEndpoints+")")
		case k == KindRedisRestart && d.redis.External():
			d.skipped = append(d.skipped, string(k)+": Redis is external ("+redisx.EnvAddr+")")
		case k == KindTemporalRestart && d.temporal.External():
			d.skipped = append(d.skipped, string(k)+": Temporal is external (BATON_TEMPORAL_ADDRESS)")
		default:
			d.kinds = append(d.kinds, k)
		}
	}

	for range d.cfg.Workers {
		var ps []*etcdx.Proxy
		for _, ep := range d.etcd.Endpoints() {
			p, err := etcdx.NewProxy(ep)
			if err != nil {
				return err
			}
			ps = append(ps, p)
		}
		d.proxies = append(d.proxies, ps)
	}
	setupStep := &Step{Name: "start-up", At: time.Now()}
	d.steps = append(d.steps, setupStep)
	if err := harness.Parallel(ctx, d.cfg.Workers, d.cfg.Workers, func(ctx context.Context, i int) error {
		_, err := d.startSlot(ctx, i)
		return err
	}); err != nil {
		return err
	}
	d.bgWG.Go(d.monitorOrphans)
	if !d.waitSteady(ctx, setupStep, nil, 60*time.Second) {
		return errors.New("the fleet never settled after start-up (see the violations)")
	}
	d.logf("%d workers ready; every queue has one leader with an open dispatcher run", d.cfg.Workers)
	return nil
}

type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

// binPath is the demo-worker binary named by flag (the binary or its directory).
func binPath(flag string) (string, error) {
	if st, err := os.Stat(flag); err == nil && st.IsDir() {
		flag = filepath.Join(flag, "demo-worker")
	}
	if _, err := os.Stat(flag); err != nil {
		return "", fmt.Errorf("demo-worker binary: %w", err)
	}
	return flag, nil
}

// teardown stops everything the drill started; it runs once, also after an error or an interrupt.
func (d *Drill) teardown() {
	d.bgCancel()
	d.mu.Lock()
	procs := append([]*proc(nil), d.procs...)
	d.mu.Unlock()
	for _, p := range procs {
		p.teardownKill()
	}
	if d.load != nil && d.load.proc != nil {
		d.load.proc.Kill()
	}
	d.bgWG.Wait()
	if d.tc != nil {
		d.tc.Close()
	}
	if d.rdb != nil {
		d.rdb.Close()
	}
	if d.ec != nil {
		d.ec.Close()
	}
	if d.stack != nil {
		_ = d.stack.Close()
	}
	for _, ps := range d.proxies {
		for _, p := range ps {
			_ = p.Close()
		}
	}
	if d.tempDir {
		d.mu.Lock()
		keep := len(d.violations) > 0
		d.mu.Unlock()
		if keep {
			fmt.Fprintf(d.cfg.Out, "logs kept (violations found): %s\n", d.dir)
		} else {
			_ = os.RemoveAll(d.dir)
		}
	}
}

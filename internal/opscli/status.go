package opscli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/ownership"
	"github.com/baton-run/baton/progress"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// Status is `prog status`: who leads each queue, its dispatcher run, heartbeat and workers, read
// straight from etcd, Temporal and Redis, so it works with every worker down. ignore names prog's
// own BATON_* variables.
func Status(ctx context.Context, prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	o, err := parseStatus(prog, args, stdout, ignore)
	switch {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s status: %v\n", prog, err)
		return ExitConfig
	}
	redis.SetLogger(quietRedis{}) // a Redis that is down is reported once, in the warnings
	rep := collectStatus(ctx, o)
	if o.json {
		err = writeJSON(stdout, rep)
	} else {
		err = writeTable(stdout, rep)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s status: %v\n", prog, err)
		return ExitUnclean
	}
	if !rep.etcdOK {
		return ExitUnclean
	}
	return ExitOK
}

// Hooks is the smallest fx.Lifecycle: it collects the stop hooks of what a command opens (its clients,
// a metrics server) and runs them when the command ends.
type Hooks []fx.Hook

// Append keeps x for Stop.
func (h *Hooks) Append(x fx.Hook) { *h = append(*h, x) }

// Stop runs the stop hooks kept, the last first, within d, even once ctx has ended (the clients
// are closed whatever happened).
func (h Hooks) Stop(ctx context.Context, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].OnStop != nil {
			_ = h[i].OnStop(ctx)
		}
	}
}

// source is one server status reads from. After its first failure the remaining calls are skipped,
// so a server that is down costs one timeout, not one per queue.
type source struct {
	name    string
	err     error
	skipped int

	mu    sync.Mutex
	notes []string // items it could not read in full
}

func (s *source) fail(err error) { s.err = err }

// note keeps a warning about one item the source could not read in full (a memo with a codec).
func (s *source) note(w string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, w)
}

func (s *source) down() bool {
	if s.err != nil {
		s.skipped++
		return true
	}
	return false
}

func (s *source) warning() string {
	if s.err == nil {
		return ""
	}
	w := fmt.Sprintf("%s unavailable: %v", s.name, s.err)
	if s.skipped > 0 {
		w += fmt.Sprintf(" (%d later reads skipped)", s.skipped)
	}
	return w
}

// collectStatus reads etcd, Temporal and Redis, each bounded by o.timeout per call; the three are read
// in parallel.
func collectStatus(ctx context.Context, o statusOptions) report {
	rep := report{Project: o.Cfg.Project, CheckedAt: time.Now().UTC(), offlineListed: o.offline}
	etcdSrc, temporalSrc, redisSrc := &source{name: "etcd"}, &source{name: "temporal"}, &source{name: "redis"}

	var lc Hooks
	defer func() { lc.Stop(ctx, o.timeout) }()
	clientCfg := o.Clients
	if clientCfg.EtcdDialTimeout == 0 || clientCfg.EtcdDialTimeout > o.timeout {
		clientCfg.EtcdDialTimeout = o.timeout // bounds the authentication of an etcd user
	}
	etcd, err := lc.Etcd(ctx, clientCfg)
	if err != nil {
		etcdSrc.fail(err)
	}
	tc, err := lc.Temporal(clientCfg)
	if err != nil {
		temporalSrc.fail(err)
	}
	rdb, err := lc.Redis(clientCfg)
	if err != nil {
		redisSrc.fail(err)
	}
	var reg *registry.Registry
	if redisSrc.err == nil {
		regCfg := o.Cfg.Registry
		regCfg.Project = o.Cfg.Project
		if reg, err = registry.New(rdb, regCfg); err != nil {
			redisSrc.fail(err)
		}
	}
	electionCfg := o.Cfg.Election
	electionCfg.Logger = nil

	queues := o.Cfg.Queues
	if !o.queuesGiven {
		queues = discover(ctx, o, etcdSrc, etcd, electionCfg, redisSrc, reg)
	}
	rep.Queues = make([]queueStatus, len(queues))
	for i, q := range queues {
		rep.Queues[i].Queue = q
	}

	var wg sync.WaitGroup
	wg.Go(func() {
		if etcdSrc.err == nil {
			readEtcd(ctx, etcdSrc, etcd, electionCfg, o, &rep)
		}
	})
	wg.Go(func() {
		if temporalSrc.err == nil {
			readTemporal(ctx, temporalSrc, tc, o, rep.Queues)
		}
	})
	wg.Go(func() {
		if redisSrc.err == nil {
			readRedis(ctx, redisSrc, rdb, reg, o, &rep)
		}
	})
	wg.Wait()

	for _, s := range []*source{etcdSrc, temporalSrc, redisSrc} {
		if w := s.warning(); w != "" {
			rep.Warnings = append(rep.Warnings, w)
		}
		rep.Warnings = append(rep.Warnings, s.notes...)
		if s.err != nil {
			rep.down = append(rep.down, s.name)
		}
	}
	rep.etcdOK = etcdSrc.err == nil
	return rep
}

// discover lists the queues etcd has candidates for or the registry has workers of, read in parallel.
func discover(ctx context.Context, o statusOptions, etcdSrc *source, etcd *clientv3.Client, electionCfg election.Config,
	redisSrc *source, reg *registry.Registry) []string {
	var fromEtcd, fromRegistry []string
	var wg sync.WaitGroup
	wg.Go(func() {
		if etcdSrc.err == nil {
			fromEtcd = discoverEtcd(ctx, etcdSrc, etcd, electionCfg, o.Cfg.Project, o.timeout)
		}
	})
	wg.Go(func() {
		if redisSrc.err == nil {
			fromRegistry = discoverRegistry(ctx, redisSrc, reg, o.timeout)
		}
	})
	wg.Wait()
	queues := append(fromEtcd, fromRegistry...)
	slices.Sort(queues)
	return slices.Compact(queues)
}

func call[T any](ctx context.Context, timeout time.Duration, f func(context.Context) (T, error)) (T, error) {
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return f(cctx)
}

// discoverEtcd lists the queues with candidates: keys <prefix>/<project>/<queue>/<lease>.
func discoverEtcd(ctx context.Context, src *source, cli *clientv3.Client, cfg election.Config, project string, timeout time.Duration) []string {
	keys := election.Keys{Prefix: election.DefaultConfig().Prefix}
	if cfg.Prefix != "" {
		keys.Prefix = cfg.Prefix
	}
	prefix := keys.Project(project)
	resp, err := call(ctx, timeout, func(ctx context.Context) (*clientv3.GetResponse, error) {
		return cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	})
	if err != nil {
		src.fail(fmt.Errorf("list election keys under %s: %w", prefix, err))
		return nil
	}
	var out []string
	for _, kv := range resp.Kvs {
		if q, ok := keys.Queue(project, string(kv.Key)); ok {
			out = append(out, q)
		}
	}
	return out
}

// discoverRegistry lists the queues with registered workers.
func discoverRegistry(ctx context.Context, src *source, reg *registry.Registry, timeout time.Duration) []string {
	var out []string
	cursor := ""
	for {
		page, err := call(ctx, timeout, func(ctx context.Context) ([]registry.Worker, error) {
			var err error
			var ws []registry.Worker
			ws, cursor, err = reg.List(ctx, registry.Filter{}, cursor, registry.MaxListLimit)
			return ws, err
		})
		if err != nil {
			src.fail(fmt.Errorf("list the worker registry: %w", err))
			return out
		}
		for _, w := range page {
			out = append(out, w.Queue)
		}
		if cursor == "" {
			return out
		}
	}
}

func readEtcd(ctx context.Context, src *source, cli *clientv3.Client, cfg election.Config, o statusOptions, rep *report) {
	leader := func(el *election.Elector, queue string) leaderCell {
		if src.down() {
			return leaderCell{}
		}
		l, err := call(ctx, o.timeout, func(ctx context.Context) (election.Leader, error) {
			return el.Leader(ctx, o.Cfg.Project, queue)
		})
		switch {
		case errors.Is(err, election.ErrNoLeader):
			return leaderCell{Known: true}
		case err != nil:
			src.fail(err)
			return leaderCell{}
		}
		return leaderCell{Known: true, ServerID: l.ID, Token: l.Token}
	}
	// New starts nothing and Leader starts no goroutine, so Close returns at once.
	el, err := election.New(cli, cfg)
	if err != nil {
		src.fail(err)
		return
	}
	defer func() { _ = el.Close(ctx) }()
	for i := range rep.Queues {
		rep.Queues[i].Leader = leader(el, rep.Queues[i].Queue)
	}
	recCfg := cfg
	recCfg.Prefix = o.Cfg.ReconcilerElectionPrefix
	if recCfg.Prefix == "" {
		recCfg.Prefix = reconciler.DefaultElectionPrefix
	}
	recEl, err := election.New(cli, recCfg)
	if err != nil {
		src.fail(err)
		return
	}
	defer func() { _ = recEl.Close(ctx) }()
	rep.Reconciler = leader(recEl, reconciler.ElectionQueue)
}

func readTemporal(ctx context.Context, src *source, tc client.Client, o statusOptions, queues []queueStatus) {
	for i := range queues {
		q := &queues[i]
		id, err := takeover.WorkflowID(o.Cfg.Project, q.Queue)
		if err != nil {
			src.fail(err)
			continue
		}
		q.Dispatcher.WorkflowID = id
		if src.down() {
			continue
		}
		resp, err := call(ctx, o.timeout, func(ctx context.Context) (*workflowDescription, error) {
			d, err := tc.DescribeWorkflowExecution(ctx, id, "")
			if err != nil {
				return nil, err
			}
			info := d.GetWorkflowExecutionInfo()
			desc := &workflowDescription{runID: info.GetExecution().GetRunId(), status: info.GetStatus(),
				start: info.GetStartTime().AsTime(), raw: d}
			desc.owner, _, desc.ownerErr = takeover.DecodeOwner(nil, info.GetMemo())
			return desc, nil
		})
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			q.Dispatcher.Known = true
		case err != nil:
			src.fail(fmt.Errorf("describe %s: %w", id, err))
		default:
			q.Dispatcher = runCell{Known: true, WorkflowID: id, RunID: resp.runID, Status: statusName(resp.status),
				StartTime: resp.start.UTC(), OwnerServerID: resp.owner.ServerID, OwnerToken: resp.owner.Token}
			if resp.ownerErr != nil {
				src.note(fmt.Sprintf("%s: %v", id, resp.ownerErr))
			}
			q.Dispatcher.RunsFailing = runsFailing(ctx, src, tc, o, id, resp)
			if resp.status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
				pcfg := o.Cfg.Progress
				pcfg.CallTimeout = o.timeout
				rep := progress.Judge(ctx, tc, pcfg, resp.raw, time.Now())
				q.Dispatcher.Progress = &rep
			}
		}
	}
}

// runsFailing lists the latest runs of id when its current run is closed or young, and returns the
// streak of runs that failed right after their start (failStreak); a run open for longer than
// ownership.RunFailingWithin has none, and costs no listing.
func runsFailing(ctx context.Context, src *source, tc client.Client, o statusOptions, id string, cur *workflowDescription) int {
	now := time.Now()
	if cur.status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING && now.Sub(cur.start) >= ownership.RunFailingWithin {
		return 0
	}
	runs, err := listPastRuns(ctx, tc, id, failingRunsShown, o.timeout, nil)
	if err != nil {
		src.note(err.Error())
		return 0
	}
	n, _ := failStreak(runs, now, nil)
	return n
}

type workflowDescription struct {
	runID    string
	status   enumspb.WorkflowExecutionStatus
	start    time.Time
	owner    takeover.Owner
	ownerErr error
	raw      *workflowservice.DescribeWorkflowExecutionResponse // for progress.Judge
}

func statusName(s enumspb.WorkflowExecutionStatus) string {
	name, ok := enumspb.WorkflowExecutionStatus_name[int32(s)]
	if !ok {
		return fmt.Sprintf("STATUS_%d", s)
	}
	return strings.TrimPrefix(name, "WORKFLOW_EXECUTION_STATUS_")
}

func readRedis(ctx context.Context, src *source, rdb redis.UniversalClient, reg *registry.Registry, o statusOptions, rep *report) {
	now, err := call(ctx, o.timeout, func(ctx context.Context) (time.Time, error) { return rdb.Time(ctx).Result() })
	if err != nil {
		src.fail(fmt.Errorf("TIME: %w", err))
	}
	prefix := o.Cfg.Heartbeat.Prefix
	if prefix == "" {
		prefix = heartbeat.DefaultPrefix
	}
	for i := range rep.Queues {
		q := &rep.Queues[i]
		id, err := takeover.WorkflowID(o.Cfg.Project, q.Queue)
		if err != nil || src.down() {
			continue
		}
		key := heartbeat.Key(prefix, o.Cfg.Project, id)
		fields, err := call(ctx, o.timeout, func(ctx context.Context) (map[string]string, error) {
			return rdb.HGetAll(ctx, key).Result()
		})
		switch {
		case err != nil:
			src.fail(fmt.Errorf("HGETALL %s: %w", key, err))
		case len(fields) == 0:
			q.Heartbeat.Known = true
		default:
			e, err := heartbeat.Decode(prefix, key, fields)
			if err != nil {
				rep.Warnings = append(rep.Warnings, err.Error())
				break
			}
			q.Heartbeat = heartbeatCell{Known: true, ServerID: e.ServerID, RunID: e.RunID, Token: e.Token,
				UpdatedAt: e.UpdatedAt.UTC(), Age: seconds(e.Age(now))}
		}
		if src.down() {
			continue
		}
		q.Workers, q.OfflineWorkers = countWorkers(ctx, src, reg, q.Queue, o)
	}
}

// countWorkers reads the registry's workers of queue and counts them; with -offline it also lists the
// OFFLINE ones, newest departure first.
func countWorkers(ctx context.Context, src *source, reg *registry.Registry, queue string, o statusOptions) (workersCell, []offlineWorker) {
	w := workersCell{Known: true}
	var gone []offlineWorker
	if o.offline {
		gone = []offlineWorker{} // listed, even when there is none
	}
	cursor := ""
	for {
		page, err := call(ctx, o.timeout, func(ctx context.Context) ([]registry.Worker, error) {
			var err error
			var ws []registry.Worker
			ws, cursor, err = reg.List(ctx, registry.Filter{Queue: queue}, cursor, registry.MaxListLimit)
			return ws, err
		})
		if err != nil {
			src.fail(fmt.Errorf("list the workers of %s: %w", queue, err))
			return workersCell{}, nil
		}
		for _, x := range page {
			w.add(x)
			if o.offline && x.Status == registry.StatusOffline {
				gone = append(gone, newOfflineWorker(x))
			}
		}
		if cursor == "" {
			slices.SortStableFunc(gone, func(a, b offlineWorker) int { return b.DepartedAt.Compare(a.DepartedAt) })
			return w, gone
		}
	}
}

// add counts x by its status and, for an OFFLINE worker, by how it went: a clean Deregister (left) or
// its leader's eviction (evicted). The load of a live worker adds up; an OFFLINE one's is history.
func (c *workersCell) add(x registry.Worker) {
	switch x.Status {
	case registry.StatusOnline:
		c.Online++
	case registry.StatusDraining:
		c.Draining++
	case registry.StatusOffline:
		c.Offline++
		if x.Evicted() {
			c.Evicted++
			return
		}
		c.Left++
		if !x.DeregisteredAt.IsZero() && (c.firstLeft.IsZero() || x.DeregisteredAt.Before(c.firstLeft)) {
			c.firstLeft = x.DeregisteredAt.UTC()
		}
		return
	}
	c.Active += x.Active
	c.Completed += x.TotalCompleted
	c.Failed += x.TotalFailed
}

func newOfflineWorker(x registry.Worker) offlineWorker {
	ow := offlineWorker{ServerID: x.ServerID, Hostname: x.Hostname, PID: x.PID, Version: x.Version,
		Departure: departureLeft, LastHeartbeat: x.LastHeartbeat.UTC()}
	if x.Evicted() {
		ow.Departure, ow.EvictedBy = departureEvicted, x.EvictedBy
	}
	if !x.DeregisteredAt.IsZero() {
		ow.DepartedAt = x.DeregisteredAt.UTC()
	}
	return ow
}

// quietRedis drops go-redis's own messages (pool dial failures): status reports a Redis that is down
// once, in its warnings.
type quietRedis struct{}

func (quietRedis) Printf(context.Context, string, ...any) {}

package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/event"
	"github.com/baton-run/baton/names"
	"github.com/baton-run/baton/takeover"
)

// Term is what a Writer needs of an election term; *election.Term satisfies it.
type Term interface {
	Token() int64
	LeaderID() string
	Context() context.Context
	// Check is the local, synchronous test that the term may act.
	Check() error
	// Confirm asks etcd whether the term still holds (an error wrapping election.ErrNotLeader once a
	// successor may exist): a write that finds a higher token stored asks it before giving way.
	Confirm(ctx context.Context) error
}

// MetricWrites counts heartbeat writes by project, queue and result (ok, superseded, not_leader,
// regression, error). regression is a write that replaced an entry with a higher token once etcd
// confirmed the writer's term: etcd's revisions went back (a restore without --bump-revision, a move
// to a new cluster), as takeover.MetricRegressions counts for runs.
const MetricWrites = "baton.heartbeat.writes"

// beatScript writes an entry unless the stored one carries a higher token, other than ARGV[10]: the
// token the writer found stored before etcd confirmed its term (a history regression), so that an
// entry written since by anyone else is never overwritten. A key of another type, or a hash whose
// token is not a number, is garbage in the owner's own key and is replaced. The time is the Redis
// server's. Returns {1, updated_ms, replaced} or {0, stored_token}; replaced is 1 for garbage, 2 for
// a higher token overwritten.
var beatScript = redis.NewScript(`
local kind = redis.call('TYPE', KEYS[1])['ok']
local replaced = 0
if kind == 'hash' then
  local cur = redis.call('HGET', KEYS[1], 'token')
  local n = tonumber(cur)
  if n and n > tonumber(ARGV[4]) then
    if ARGV[10] ~= cur then return {0, tostring(cur)} end
    replaced = 2
  end
  if cur and not n then replaced = 1 end
elseif kind ~= 'none' then
  replaced = 1
end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'workflow_id', ARGV[1], 'run_id', ARGV[2], 'server_id', ARGV[3],
  'token', ARGV[4], 'project', ARGV[5], 'queue', ARGV[6], 'updated_ms', tostring(ms), 'v', ARGV[8],
  'first_run_id', ARGV[9])
redis.call('PEXPIRE', KEYS[1], ARGV[7])
return {1, tostring(ms), replaced}
`)

// clearScript deletes the entry only while it still names the given run and token.
var clearScript = redis.NewScript(`
if redis.call('TYPE', KEYS[1])['ok'] ~= 'hash' then return 0 end
local v = redis.call('HMGET', KEYS[1], 'run_id', 'token')
if v[1] == ARGV[1] and v[2] == ARGV[2] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Writer writes the heartbeats of the dispatcher runs this process owns.
type Writer struct {
	rdb    redis.UniversalClient
	cfg    Config
	log    *zap.Logger
	writes metric.Int64Counter
}

// NewWriter returns a Writer over a Redis client.
func NewWriter(rdb redis.UniversalClient, cfg Config) (*Writer, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: Redis client must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	writes, err := cfg.MeterProvider.Meter("github.com/baton-run/baton/heartbeat").Int64Counter(MetricWrites,
		metric.WithDescription("Dispatcher heartbeat writes by result (ok, superseded, not_leader, error)."))
	if err != nil {
		return nil, fmt.Errorf("heartbeat: metrics: %w", err)
	}
	return &Writer{rdb: rdb, cfg: cfg, log: cfg.Logger, writes: writes}, nil
}

// Config returns the configuration in force, defaults applied.
func (w *Writer) Config() Config { return w.cfg }

// Key returns the heartbeat key of project's dispatcher workflow.
func (w *Writer) Key(project, workflowID string) string {
	return Key(w.cfg.Prefix, project, workflowID)
}

// Key returns the heartbeat key of project's dispatcher workflow under prefix (Config.Prefix; empty
// means DefaultPrefix): ProjectPrefix followed by the workflow ID. This is the one key layout; tools
// and the reconciler use it rather than build the key themselves.
func Key(prefix, project, workflowID string) string {
	return ProjectPrefix(prefix, project) + workflowID
}

// ProjectPrefix returns what every heartbeat key of project starts with: <prefix>{<project>}/. The
// braces make the project the key's Redis Cluster hash tag, as the registry's keys do, so that one
// project's entries share a slot; the '/', which no name contains, ends the project, so that no
// project's keys start with another's prefix ("pay" and "payments", "a}" and "a}/b" alike).
func ProjectPrefix(prefix, project string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + "{" + project + "}/"
}

// LegacyKey returns the key the releases before per-project keys gave a dispatcher's entry: the
// prefix followed by the workflow ID. This release reads and deletes such entries (the reconciler)
// and never writes them; the next release forgets them.
func LegacyKey(prefix, workflowID string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + workflowID
}

// Pattern returns the glob (SCAN MATCH, ACL key pattern) that matches exactly the keys starting with
// ProjectPrefix(prefix, project): the glob characters a name may hold are escaped.
func Pattern(prefix, project string) string {
	return names.GlobEscape(ProjectPrefix(prefix, project)) + "*"
}

// LegacyPattern returns the glob that matches project's entries of the layout before per-project
// keys (LegacyKey): the prefix and the project's dispatcher workflow ID prefix. It may match another
// project's whose name extends this one's after a '-' (that layout kept no boundary); Decode tells
// whose an entry is.
func LegacyPattern(prefix, project string) string {
	return names.GlobEscape(LegacyKey(prefix, takeover.WorkflowIDPrefix(project))) + "*"
}

// Beat writes one heartbeat for run, which term owns. It returns an error wrapping ErrNotLeader when
// the term no longer holds and ErrSuperseded when the stored entry carries a higher token and etcd
// no longer confirms the term; nothing is written in either case. A higher token stored while etcd
// confirms the term cannot be a successor's (none can exist): etcd's revisions went back, as the
// takeover treats a run's memo token. The entry is overwritten, logged at error level and counted
// (result regression), so the queue does not change hands over it.
func (w *Writer) Beat(ctx context.Context, term Term, run takeover.Run) (Entry, error) {
	e, regressed, err := w.beat(ctx, term, run)
	result := "ok"
	switch {
	case err == nil && regressed:
		result = "regression"
	case errors.Is(err, ErrNotLeader):
		result = "not_leader"
	case errors.Is(err, ErrSuperseded):
		result = "superseded"
	case err != nil:
		result = "error"
	}
	w.writes.Add(context.WithoutCancel(ctx), 1, metric.WithAttributes(attribute.String("project", run.Owner.Project),
		attribute.String("queue", run.Owner.Queue), attribute.String("result", result)))
	return e, err
}

func (w *Writer) beat(ctx context.Context, term Term, run takeover.Run) (Entry, bool, error) {
	if err := validRun(term, run); err != nil {
		return Entry{}, false, err
	}
	if err := term.Check(); err != nil {
		return Entry{}, false, fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	key := w.Key(run.Owner.Project, run.WorkflowID)
	token := strconv.FormatInt(term.Token(), 10)
	cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	write := func(overwrite string) ([]any, error) {
		res, err := beatScript.Run(cctx, w.rdb, []string{key},
			run.WorkflowID, run.RunID, term.LeaderID(), token, run.Owner.Project, run.Owner.Queue,
			w.cfg.KeyTTL.Milliseconds(), formatVersion, firstRunID(run), overwrite).Slice()
		switch {
		case err != nil:
			return nil, fmt.Errorf("heartbeat: write %s: %w", key, err)
		case len(res) < 2:
			return nil, fmt.Errorf("heartbeat: write %s: unexpected script reply %v", key, res)
		}
		return res, nil
	}
	res, err := write("")
	if err != nil {
		return Entry{}, false, err
	}
	if ok, _ := res[0].(int64); ok != 1 {
		stored := res[1]
		if err := term.Confirm(cctx); errors.Is(err, election.ErrNotLeader) {
			return Entry{}, false, fmt.Errorf("%w: %s holds token %v, ours is %s: %w", ErrSuperseded, key, stored, token, err)
		} else if err != nil {
			// Whether a successor exists is unknown: write nothing now, ask again at the next beat.
			return Entry{}, false, fmt.Errorf("heartbeat: %s holds token %v, higher than ours (%s), and etcd did not confirm our term: %w",
				key, stored, token, err)
		}
		if res, err = write(fmt.Sprint(stored)); err != nil {
			return Entry{}, false, err
		}
		if ok, _ := res[0].(int64); ok != 1 {
			return Entry{}, false, fmt.Errorf("heartbeat: %s changed to token %v while our term (%s) was confirmed; writing at the next beat",
				key, res[1], token)
		}
	}
	ms, err := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
	if err != nil {
		return Entry{}, false, fmt.Errorf("heartbeat: write %s: unexpected time %v", key, res[1])
	}
	regressed := false
	if len(res) > 2 {
		switch replaced, _ := res[2].(int64); replaced {
		case 1:
			w.log.Warn("heartbeat replaced a malformed entry in its own key", zap.String("key", key))
		case 2:
			regressed = true
			w.log.Error("heartbeat entry carried a higher token than the confirmed term: etcd revisions went back (restored without --bump-revision?); overwritten",
				zap.String("key", key), zap.String("project", run.Owner.Project), zap.String("queue", run.Owner.Queue),
				zap.Int64("token", term.Token()), zap.String("run_id", run.RunID))
		}
	}
	return Entry{
		Key: key, WorkflowID: run.WorkflowID, RunID: run.RunID, FirstRunID: firstRunID(run), ServerID: term.LeaderID(),
		Project: run.Owner.Project, Queue: run.Owner.Queue, Token: term.Token(),
		UpdatedAt: time.UnixMilli(ms), UpdatedMs: ms,
	}, regressed, nil
}

// Run writes a heartbeat for run at once and then every Interval, until ctx ends or the term ends
// (it returns nil then). A failed write is logged, counted and tried again at the next tick; a refusal
// because a higher token is stored returns ErrSuperseded, since this process is no longer the owner.
func (w *Writer) Run(ctx context.Context, term Term, run takeover.Run) error {
	return w.RunReporting(ctx, term, run, nil)
}

// RunReporting is Run that also tells report the result of every write (nil for a success), so the
// owner can show a write that Redis keeps refusing (an ACL without a command, a read-only replica) in
// its status and readiness.
func (w *Writer) RunReporting(ctx context.Context, term Term, run takeover.Run, report func(error)) error {
	if err := validRun(term, run); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(term.Context(), cancel)
	defer stop()
	log := w.log.With(zap.String("project", run.Owner.Project), zap.String("queue", run.Owner.Queue),
		zap.String("server_id", term.LeaderID()), zap.Int64("token", term.Token()),
		zap.String("workflow_id", run.WorkflowID), zap.String("run_id", run.RunID))
	failing := false
	emit := func(k event.Kind, err error) {
		w.cfg.Events.Emit(event.Event{Kind: k, At: w.cfg.Clock.Now(), Project: run.Owner.Project, Queue: run.Owner.Queue,
			ServerID: term.LeaderID(), Token: term.Token(), WorkflowID: run.WorkflowID, RunID: run.RunID, Err: event.ErrText(err)})
	}
	for {
		_, err := w.Beat(ctx, term, run)
		if report != nil && ctx.Err() == nil {
			report(err)
		}
		switch {
		case ctx.Err() != nil || errors.Is(err, ErrNotLeader):
			return nil
		case errors.Is(err, ErrSuperseded):
			log.Warn("heartbeat refused: a newer owner's entry is stored", zap.Error(err))
			emit(event.HeartbeatRefused, err)
			return err
		case err != nil:
			log.Warn("heartbeat write failed; retrying at the next interval", zap.Error(err))
			emit(event.HeartbeatFailed, err)
			failing = true
		case failing:
			log.Info("heartbeat writes recovered")
			emit(event.HeartbeatRecovered, nil)
			failing = false
		}
		if !clock.Sleep(ctx, w.cfg.Clock, w.cfg.Interval) {
			return nil
		}
	}
}

// Clear removes run's entry while it still names run and term's token: a graceful owner that
// terminated its own run leaves nothing for the reconciler. A newer owner's entry is left alone.
func (w *Writer) Clear(ctx context.Context, term Term, run takeover.Run) error {
	if err := validRun(term, run); err != nil {
		return err
	}
	key := w.Key(run.Owner.Project, run.WorkflowID)
	cctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	if err := clearScript.Run(cctx, w.rdb, []string{key}, run.RunID, strconv.FormatInt(term.Token(), 10)).Err(); err != nil {
		return fmt.Errorf("heartbeat: clear %s: %w", key, err)
	}
	return nil
}

func validRun(term Term, run takeover.Run) error {
	switch {
	case term == nil:
		return fmt.Errorf("heartbeat: term must not be nil")
	case run.WorkflowID == "" || run.RunID == "":
		return fmt.Errorf("heartbeat: run must have a workflow ID and a run ID, got %q/%q", run.WorkflowID, run.RunID)
	case run.Owner.Token != term.Token():
		return fmt.Errorf("%w: run %s belongs to token %d, not to this term (%d)", ErrNotLeader, run.RunID, run.Owner.Token, term.Token())
	}
	return nil
}

// firstRunID is the first run of run's chain: the run itself when it was never continued.
func firstRunID(run takeover.Run) string {
	if run.FirstRunID != "" {
		return run.FirstRunID
	}
	return run.RunID
}

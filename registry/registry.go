package registry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Registry is the worker registry of one project on Redis. It is safe for concurrent use and starts
// no goroutines.
type Registry struct {
	rdb  redis.UniversalClient
	cfg  Config
	keys keys
	log  *zap.Logger
	m    *metrics
}

// New returns a Registry over a Redis client (a *redis.Client, *redis.ClusterClient or
// *redis.Ring... any redis.UniversalClient).
func New(rdb redis.UniversalClient, cfg Config) (*Registry, error) {
	if rdb == nil {
		return nil, fmt.Errorf("%w: Redis client must not be nil", ErrInvalidConfig)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	m, err := newMetrics(cfg.MeterProvider, cfg.Project)
	if err != nil {
		return nil, fmt.Errorf("registry: metrics: %w", err)
	}
	return &Registry{
		rdb: rdb, cfg: cfg, keys: newKeys(cfg.Prefix, cfg.Project), m: m,
		log: cfg.Logger.With(zap.String("project", cfg.Project)),
	}, nil
}

// Config returns the configuration in force, defaults applied.
func (r *Registry) Config() Config { return r.cfg }

// WorkerKey returns the key of a worker's record (a hash).
func (r *Registry) WorkerKey(queue, serverID string) string { return r.keys.worker(queue, serverID) }

// HeartbeatKey returns the key of a queue's heartbeat sorted set.
func (r *Registry) HeartbeatKey(queue string) string { return r.keys.heartbeats(queue) }

// IndexKey returns the key of the project's index of records.
func (r *Registry) IndexKey() string { return r.keys.index() }

// Register records a worker as ONLINE, replacing any earlier record of the same (queue, server ID),
// and returns the record. Its heartbeat clock starts now (Redis time). It returns an error wrapping
// ErrInvalidRegistration, naming the field and the rule, for an invalid registration.
func (r *Registry) Register(ctx context.Context, reg Registration) (Worker, error) {
	if err := reg.Validate(); err != nil {
		return Worker{}, err
	}
	capabilities, labels := encodeRegistration(reg)
	res, err := registerScript.Run(ctx, r.rdb,
		[]string{r.keys.worker(reg.Queue, reg.ServerID), r.keys.heartbeats(reg.Queue), r.keys.index(), r.keys.gone(reg.Queue)},
		reg.ServerID, reg.Queue, reg.Hostname, reg.PID, reg.Version, capabilities, labels, reg.MaxConcurrency,
		indexMember(reg.Queue, reg.ServerID), formatVersion).Slice()
	if err != nil {
		return Worker{}, fmt.Errorf("registry: register %s/%s: %w", reg.Queue, reg.ServerID, err)
	}
	ms, repaired, err := msReply(res)
	if err != nil {
		return Worker{}, fmt.Errorf("registry: register %s/%s: %w", reg.Queue, reg.ServerID, err)
	}
	log := r.log.With(zap.String("queue", reg.Queue), zap.String("server_id", reg.ServerID))
	if repaired > 0 {
		r.m.malformedSeen(ctx, "register", int(repaired))
		log.Warn("registration replaced malformed registry keys (not sorted sets)", zap.Int64("keys", repaired))
	}
	log.Info("worker registered", zap.String("hostname", reg.Hostname), zap.Int("pid", reg.PID),
		zap.String("version", reg.Version), zap.Int("capabilities", len(reg.Capabilities)),
		zap.Int("max_concurrency", reg.MaxConcurrency))
	labelMap := make(map[string]string, len(reg.Labels))
	for k, v := range reg.Labels {
		labelMap[k] = v
	}
	at := time.UnixMilli(ms)
	return Worker{
		ServerID: reg.ServerID, Queue: reg.Queue, Status: StatusOnline, Hostname: reg.Hostname, PID: reg.PID,
		Version: reg.Version, Capabilities: append([]string(nil), reg.Capabilities...), Labels: labelMap,
		MaxConcurrency: reg.MaxConcurrency, RegisteredAt: at, LastHeartbeat: at,
	}, nil
}

// Heartbeat records that the worker is alive: it sets the active count, adds the deltas to the
// totals, and stamps the heartbeat with the Redis server's time, in one script call. It answers the
// worker's status: a worker asked to drain learns it here (StatusDraining). A worker the registry
// does not hold as ONLINE or DRAINING (never registered, deregistered, evicted, expired, or a record
// that cannot be read) gets an error wrapping ErrNotRegistered, and should Register again; the
// status is then StatusOffline for an OFFLINE record, "" otherwise.
func (r *Registry) Heartbeat(ctx context.Context, queue, serverID string, b Beat) (Status, error) {
	st, err := r.heartbeat(ctx, queue, serverID, b)
	result := "ok"
	switch {
	case errors.Is(err, ErrNotRegistered):
		result = "not_registered"
	case errors.Is(err, ErrInvalidArgument):
		result = "invalid"
	case err != nil:
		result = "error"
	}
	r.m.heartbeat(ctx, result)
	return st, err
}

func (r *Registry) heartbeat(ctx context.Context, queue, serverID string, b Beat) (Status, error) {
	if err := checkIDs(queue, serverID); err != nil {
		return "", err
	}
	if err := b.validate(); err != nil {
		return "", err
	}
	key := r.keys.worker(queue, serverID)
	res, err := heartbeatScript.Run(ctx, r.rdb, []string{key, r.keys.heartbeats(queue)},
		serverID, b.Active, b.CompletedDelta, b.FailedDelta).Slice()
	if err != nil {
		return "", fmt.Errorf("registry: heartbeat %s/%s: %w", queue, serverID, err)
	}
	if replyCode(res) != 1 {
		return r.refused(ctx, "heartbeat", key, res, ErrNotRegistered, ErrNotRegistered)
	}
	if len(res) < 4 {
		return "", fmt.Errorf("registry: heartbeat %s/%s: unexpected script reply %v", queue, serverID, res)
	}
	if repaired, _ := res[3].(int64); repaired > 0 {
		r.m.malformedSeen(ctx, "heartbeat", int(repaired))
		r.log.Warn("heartbeat replaced malformed counters or keys", zap.String("queue", queue),
			zap.String("server_id", serverID), zap.Int64("fields", repaired))
	}
	st, _ := res[1].(string)
	return Status(st), nil
}

// refused turns a {0, reason, detail} script reply into the error for op: absent is the sentinel for
// a missing record, notHeld the one for a record that exists but is not ONLINE or DRAINING.
func (r *Registry) refused(ctx context.Context, op, key string, res []any, absent, notHeld error) (Status, error) {
	reason, detail := replyString(res, 1), replyString(res, 2)
	switch reason {
	case "absent":
		return "", fmt.Errorf("%w: %s: no record (never registered, or expired)", absent, key)
	case "offline":
		return StatusOffline, fmt.Errorf("%w: %s is OFFLINE (deregistered or evicted)", notHeld, key)
	case "type":
		r.m.malformedSeen(ctx, op, 1)
		return "", fmt.Errorf("%w: %w: key %s: holds a %s, not a hash", notHeld, ErrMalformed, key, detail)
	case "status":
		r.m.malformedSeen(ctx, op, 1)
		return "", fmt.Errorf("%w: %w: key %s: %s must be ONLINE, DRAINING or OFFLINE, got %q", notHeld, ErrMalformed, key, FieldStatus, detail)
	}
	return "", fmt.Errorf("registry: %s %s: unexpected script reply %v", op, key, res)
}

// Drain asks the worker to finish its running tasks and take no new ones: its status becomes
// DRAINING, which its next heartbeat answers. Draining a DRAINING worker is a no-op. It returns an
// error wrapping ErrNotFound when there is no record, and ErrOffline for an OFFLINE worker.
func (r *Registry) Drain(ctx context.Context, queue, serverID string) error {
	if err := r.setStatus(ctx, "drain", queue, serverID, StatusDraining); err != nil {
		return err
	}
	r.log.Info("worker asked to drain", zap.String("queue", queue), zap.String("server_id", serverID))
	return nil
}

// Undrain takes back a Drain: a DRAINING worker becomes ONLINE again, which its next heartbeat
// answers (it stands for its queues again). Undraining an ONLINE worker is a no-op. It returns an
// error wrapping ErrNotFound when there is no record, and ErrOffline for an OFFLINE worker.
func (r *Registry) Undrain(ctx context.Context, queue, serverID string) error {
	if err := r.setStatus(ctx, "undrain", queue, serverID, StatusOnline); err != nil {
		return err
	}
	r.log.Info("worker drain taken back", zap.String("queue", queue), zap.String("server_id", serverID))
	return nil
}

// setStatus sets a live worker's status (statusScript); op names the operation in errors.
func (r *Registry) setStatus(ctx context.Context, op, queue, serverID string, status Status) error {
	if err := checkIDs(queue, serverID); err != nil {
		return err
	}
	key := r.keys.worker(queue, serverID)
	res, err := statusScript.Run(ctx, r.rdb, []string{key}, string(status)).Slice()
	if err != nil {
		return fmt.Errorf("registry: %s %s/%s: %w", op, queue, serverID, err)
	}
	if replyCode(res) != 1 {
		_, err := r.refused(ctx, op, key, res, ErrNotFound, ErrOffline)
		return err
	}
	return nil
}

// Deregister sets the worker OFFLINE and stops watching its heartbeat. The record stays visible
// for Retention, then expires. Deregistering an OFFLINE worker changes nothing. It returns an error
// wrapping ErrNotFound when there is no record. A malformed record is deregistered all the same (it
// leaves the heartbeat set and expires after Retention), and logged.
func (r *Registry) Deregister(ctx context.Context, queue, serverID string) error {
	if err := checkIDs(queue, serverID); err != nil {
		return err
	}
	key := r.keys.worker(queue, serverID)
	res, err := deregisterScript.Run(ctx, r.rdb, []string{key, r.keys.heartbeats(queue), r.keys.gone(queue)},
		serverID, r.cfg.Retention.Milliseconds()).Slice()
	if err != nil {
		return fmt.Errorf("registry: deregister %s/%s: %w", queue, serverID, err)
	}
	log := r.log.With(zap.String("queue", queue), zap.String("server_id", serverID))
	switch replyCode(res) {
	case 0:
		return fmt.Errorf("%w: %s: no record (never registered, or expired)", ErrNotFound, key)
	case 2:
		return nil
	case 1:
	default:
		return fmt.Errorf("registry: deregister %s/%s: unexpected script reply %v", queue, serverID, res)
	}
	if kind := replyString(res, 1); kind != "ok" {
		detail := replyString(res, 2)
		r.m.malformedSeen(ctx, "deregister", 1)
		log.Warn("deregistered a malformed record; it expires after the retention",
			zap.String("key", key), zap.String("problem", kind), zap.String("detail", detail))
		return nil
	}
	log.Info("worker deregistered", zap.Duration("retention", r.cfg.Retention))
	return nil
}

// Get returns the worker's record. It returns an error wrapping ErrNotFound when there is none, and
// ErrMalformed, naming the key and the field, when it cannot be read.
func (r *Registry) Get(ctx context.Context, queue, serverID string) (Worker, error) {
	if err := checkIDs(queue, serverID); err != nil {
		return Worker{}, err
	}
	key := r.keys.worker(queue, serverID)
	fields, err := r.rdb.HGetAll(ctx, key).Result()
	switch {
	case isWrongType(err):
		return Worker{}, fmt.Errorf("%w: key %s: holds a value that is not a hash", ErrMalformed, key)
	case err != nil:
		return Worker{}, fmt.Errorf("registry: get %s/%s: %w", queue, serverID, err)
	case len(fields) == 0:
		return Worker{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return decodeWorker(key, queue, serverID, fields)
}

func isWrongType(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }

// msReply parses a {ms, n} script reply.
func msReply(res []any) (ms, n int64, err error) {
	if len(res) < 2 {
		return 0, 0, fmt.Errorf("unexpected script reply %v", res)
	}
	s, _ := res[0].(string)
	if ms, err = strconv.ParseInt(s, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("unexpected time %v in script reply", res[0])
	}
	n, _ = res[1].(int64)
	return ms, n, nil
}

// replyCode returns the leading integer of a script reply, or -1.
func replyCode(res []any) int64 {
	if len(res) == 0 {
		return -1
	}
	if n, ok := res[0].(int64); ok {
		return n
	}
	return -1
}

// replyString returns element i of a script reply as a string, or "".
func replyString(res []any, i int) string {
	if i >= len(res) {
		return ""
	}
	s, _ := res[i].(string)
	return s
}

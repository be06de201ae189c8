package registry

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/baton-run/baton/names"
)

// Status is a worker's lifecycle state.
type Status string

// The statuses a worker goes through. A worker registers ONLINE; DRAINING asks it to finish its
// tasks and take no new ones (it learns so from its next heartbeat's answer); OFFLINE is final for
// the record: deregistered or evicted, kept for Retention, then gone.
const (
	StatusOnline   Status = "ONLINE"
	StatusDraining Status = "DRAINING"
	StatusOffline  Status = "OFFLINE"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool {
	return s == StatusOnline || s == StatusDraining || s == StatusOffline
}

// Hash fields of a worker record.
const (
	FieldServerID       = "server_id"
	FieldQueue          = "queue"
	FieldStatus         = "status"
	FieldHostname       = "hostname"
	FieldPID            = "pid"
	FieldVersion        = "version"
	FieldCapabilities   = "capabilities" // JSON array of strings
	FieldLabels         = "labels"       // JSON object of strings
	FieldMaxConcurrency = "max_concurrency"
	FieldActive         = "active"
	FieldTotalCompleted = "total_completed"
	FieldTotalFailed    = "total_failed"
	FieldRegisteredMs   = "registered_ms"     // Redis server time, Unix milliseconds
	FieldLastHeartbeat  = "last_heartbeat_ms" // Redis server time, Unix milliseconds
	FieldDeregisteredMs = "deregistered_ms"   // set when the worker goes OFFLINE
	FieldEvictedBy      = "evicted_by"        // fencing token of the evicting leader
	FieldVersionFormat  = "v"
)

// formatVersion is the record layout written by this package.
const formatVersion = "1"

// Worker is one worker's record. Every time in it is the Redis server's.
type Worker struct {
	ServerID       string
	Queue          string
	Status         Status
	Hostname       string
	PID            int
	Version        string
	Capabilities   []string
	Labels         map[string]string
	MaxConcurrency int
	// Active is the number of running tasks the last heartbeat reported.
	Active int
	// TotalCompleted and TotalFailed are the sums of the heartbeats' deltas since registration.
	TotalCompleted int64
	TotalFailed    int64
	RegisteredAt   time.Time
	LastHeartbeat  time.Time
	// DeregisteredAt is when the worker went OFFLINE; zero otherwise.
	DeregisteredAt time.Time
	// EvictedBy is the fencing token of the leader that evicted the worker; 0 unless evicted.
	EvictedBy int64
}

// Evicted reports whether the worker went OFFLINE by its queue's leader's eviction, because its
// heartbeat stopped (a crash, a kill, a cut from Redis); EvictedBy is then the leader's fencing token.
// An OFFLINE worker that was not evicted deregistered itself: a clean stop, as on every restart.
func (w Worker) Evicted() bool { return w.Status == StatusOffline && w.EvictedBy != 0 }

// HasCapability reports whether the worker declared capability c.
func (w Worker) HasCapability(c string) bool { return slices.Contains(w.Capabilities, c) }

// decodeWorker reads the record stored at key for (queue, serverID). It returns an error wrapping
// ErrMalformed, naming the key and the field, for anything this package would not have written.
func decodeWorker(key, queue, serverID string, f map[string]string) (Worker, error) {
	bad := func(field, format string, args ...any) (Worker, error) {
		return Worker{}, fmt.Errorf("%w: key %s: %s %s", ErrMalformed, names.Quote(key), field, fmt.Sprintf(format, args...))
	}
	if v, ok := f[FieldVersionFormat]; ok && v != formatVersion {
		return bad(FieldVersionFormat, "is an unknown format version %s", names.Quote(v))
	}
	if f[FieldServerID] != serverID {
		return bad(FieldServerID, "%s does not match the key's server ID %s", names.Quote(f[FieldServerID]), names.Quote(serverID))
	}
	if f[FieldQueue] != queue {
		return bad(FieldQueue, "%s does not match the key's queue %s", names.Quote(f[FieldQueue]), names.Quote(queue))
	}
	w := Worker{ServerID: serverID, Queue: queue, Status: Status(f[FieldStatus]),
		Hostname: f[FieldHostname], Version: f[FieldVersion]}
	if !w.Status.Valid() {
		return bad(FieldStatus, "must be ONLINE, DRAINING or OFFLINE, got %s", names.Quote(f[FieldStatus]))
	}
	if err := json.Unmarshal([]byte(f[FieldCapabilities]), &w.Capabilities); err != nil || w.Capabilities == nil {
		return bad(FieldCapabilities, "must be a JSON array of strings, got %s", names.Quote(f[FieldCapabilities]))
	}
	if err := json.Unmarshal([]byte(f[FieldLabels]), &w.Labels); err != nil {
		return bad(FieldLabels, "must be a JSON object of strings, got %s", names.Quote(f[FieldLabels]))
	}
	if w.Labels == nil { // JSON null
		w.Labels = map[string]string{}
	}
	ints := []struct {
		field    string
		min      int64
		optional bool
		dst      *int64
	}{
		{FieldPID, 1, false, nil}, {FieldMaxConcurrency, 1, false, nil}, {FieldActive, 0, false, nil},
		{FieldTotalCompleted, 0, false, &w.TotalCompleted}, {FieldTotalFailed, 0, false, &w.TotalFailed},
		{FieldRegisteredMs, 1, false, nil}, {FieldLastHeartbeat, 1, false, nil},
		{FieldDeregisteredMs, 1, true, nil}, {FieldEvictedBy, 1, true, &w.EvictedBy},
	}
	vals := make(map[string]int64, len(ints))
	for _, in := range ints {
		raw, ok := f[in.field]
		if !ok && in.optional {
			continue
		}
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || n < in.min {
			return bad(in.field, "must be an integer of at least %d, got %s", in.min, names.Quote(raw))
		}
		vals[in.field] = n
		if in.dst != nil {
			*in.dst = n
		}
	}
	for _, field := range []string{FieldPID, FieldMaxConcurrency, FieldActive} {
		if vals[field] > maxHeartbeatCounter {
			return bad(field, "must be at most %d, got %d", maxHeartbeatCounter, vals[field])
		}
	}
	w.PID, w.MaxConcurrency, w.Active = int(vals[FieldPID]), int(vals[FieldMaxConcurrency]), int(vals[FieldActive])
	w.RegisteredAt = time.UnixMilli(vals[FieldRegisteredMs])
	w.LastHeartbeat = time.UnixMilli(vals[FieldLastHeartbeat])
	if ms, ok := vals[FieldDeregisteredMs]; ok {
		w.DeregisteredAt = time.UnixMilli(ms)
	}
	return w, nil
}

// encodeRegistration renders the JSON fields of a validated registration.
func encodeRegistration(reg Registration) (capabilities, labels string) {
	c, _ := json.Marshal(reg.Capabilities) // []string and map[string]string always marshal
	labelMap := reg.Labels
	if labelMap == nil {
		labelMap = map[string]string{}
	}
	l, _ := json.Marshal(labelMap)
	return string(c), string(l)
}

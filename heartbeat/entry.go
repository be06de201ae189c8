package heartbeat

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton/names"
	"github.com/baton-run/baton/takeover"
)

// DefaultPrefix is the key prefix of heartbeat entries: the key of a dispatcher's entry is the prefix,
// its project's hash tag and its workflow ID (Key).
const DefaultPrefix = "dispatcher:heartbeat:"

// Hash fields of an entry.
const (
	FieldWorkflowID = "workflow_id"
	FieldRunID      = "run_id"
	FieldServerID   = "server_id"
	FieldToken      = "token"
	FieldProject    = "project"
	FieldQueue      = "queue"
	FieldUpdatedMs  = "updated_ms" // Redis server time of the last write, Unix milliseconds
	FieldVersion    = "v"
	// FieldFirstRunID is the first run of the chain that RunID belongs to (RunID itself unless the run
	// continued as new). Entries written before it existed lack it.
	FieldFirstRunID = "first_run_id"
)

// formatVersion is the entry layout written by this package.
const formatVersion = "1"

// Entry is one dispatcher heartbeat as stored in Redis.
type Entry struct {
	Key        string
	WorkflowID string
	RunID      string
	// FirstRunID is the first run of RunID's chain; empty in entries written before it was recorded.
	// A run-scoped action names it as the FirstExecutionRunId, so it reaches the chain's current run
	// (after continue-as-new) and never a run of another chain.
	FirstRunID string
	ServerID   string
	Project    string
	Queue      string
	Token      int64
	// UpdatedAt is the Redis server time of the last write, to the millisecond.
	UpdatedAt time.Time
	// UpdatedMs is UpdatedAt as stored; compare-and-delete matches it exactly.
	UpdatedMs int64
}

// Age returns how old the entry is at now, a Redis server time.
func (e Entry) Age(now time.Time) time.Duration { return now.Sub(e.UpdatedAt) }

// Decode reads the entry stored at key from its hash fields. It returns an error wrapping
// ErrMalformed, naming the key and the field, for anything this package would not have written:
// missing or non-numeric fields, invalid names, a workflow ID that is not the dispatcher ID of its
// project and queue, or a key that is neither Key nor LegacyKey of its project and workflow ID. Such an entry is never acted on:
// a garbage entry must not be able to point the reconciler at an arbitrary workflow.
func Decode(prefix, key string, fields map[string]string) (Entry, error) {
	bad := func(field, format string, args ...any) (Entry, error) {
		return Entry{}, fmt.Errorf("%w: key %s: %s %s", ErrMalformed, names.Quote(key), field, fmt.Sprintf(format, args...))
	}
	e := Entry{
		Key:        key,
		WorkflowID: fields[FieldWorkflowID],
		RunID:      fields[FieldRunID],
		FirstRunID: fields[FieldFirstRunID],
		ServerID:   fields[FieldServerID],
		Project:    fields[FieldProject],
		Queue:      fields[FieldQueue],
	}
	for _, f := range []struct{ name, value string }{
		{FieldWorkflowID, e.WorkflowID}, {FieldRunID, e.RunID}, {FieldServerID, e.ServerID},
	} {
		switch {
		case f.value == "":
			return bad(f.name, "is missing or empty")
		case len(f.value) > 1000:
			return bad(f.name, "is longer than 1000 bytes (%d)", len(f.value))
		case strings.ContainsFunc(f.value, func(r rune) bool { return r < 0x20 || r == 0x7f }):
			return bad(f.name, "contains control characters: %s", names.Quote(f.value))
		}
	}
	if f := e.FirstRunID; len(f) > 1000 || strings.ContainsFunc(f, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return bad(FieldFirstRunID, "must be at most 1000 bytes without control characters: %s", names.Quote(f))
	}
	if err := names.Check(e.Project); err != nil {
		return bad(FieldProject, "%s %v", names.Quote(e.Project), err)
	}
	if err := names.Check(e.Queue); err != nil {
		return bad(FieldQueue, "%s %v", names.Quote(e.Queue), err)
	}
	token, err := strconv.ParseInt(fields[FieldToken], 10, 64)
	if err != nil || token <= 0 {
		return bad(FieldToken, "must be a positive integer, got %s", names.Quote(fields[FieldToken]))
	}
	e.Token = token
	ms, err := strconv.ParseInt(fields[FieldUpdatedMs], 10, 64)
	if err != nil || ms <= 0 {
		return bad(FieldUpdatedMs, "must be a positive integer (Unix milliseconds), got %s", names.Quote(fields[FieldUpdatedMs]))
	}
	e.UpdatedMs, e.UpdatedAt = ms, time.UnixMilli(ms)
	want, err := takeover.WorkflowID(e.Project, e.Queue)
	if err != nil || want != e.WorkflowID {
		return bad(FieldWorkflowID, "%s is not the dispatcher workflow ID of project %s and queue %s",
			names.Quote(e.WorkflowID), names.Quote(e.Project), names.Quote(e.Queue))
	}
	if key != Key(prefix, e.Project, e.WorkflowID) && key != LegacyKey(prefix, e.WorkflowID) {
		return bad("key", "does not match its project %s and workflow ID %s", names.Quote(e.Project), names.Quote(e.WorkflowID))
	}
	return e, nil
}

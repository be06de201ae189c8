package reconciler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/takeover"
)

// pausedTerm is a superseded leader whose local check has not fired yet (a process resumed a moment
// ago): only the stored token can stop its write.
type pausedTerm struct {
	token int64
	id    string
	ctx   context.Context
}

func (p pausedTerm) Token() int64             { return p.token }
func (p pausedTerm) LeaderID() string         { return p.id }
func (p pausedTerm) Context() context.Context { return p.ctx }
func (p pausedTerm) Check() error             { return nil }

// Confirm answers as etcd does for a superseded term.
func (p pausedTerm) Confirm(context.Context) error {
	return fmt.Errorf("%w: a successor holds the key", election.ErrNotLeader)
}

// The heartbeat carries the Redis server's time, the run and the fencing token; a lower token never
// overwrites a higher one, and a superseded term writes nothing.
func TestHeartbeatFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: time.Hour, KeyTTL: 10 * time.Hour})
	b := e.owner(t, "node-b", election.Config{}, heartbeat.Config{Interval: time.Hour, KeyTTL: 10 * time.Hour})
	termA, err := a.el.Campaign(t.Context(), p, "orders", a.id)
	if err != nil {
		t.Fatal(err)
	}
	runA, err := a.mgr.Take(t.Context(), termA)
	if err != nil {
		t.Fatal(err)
	}
	before, err := e.rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatal(err)
	}
	entry, err := a.hb.Beat(t.Context(), termA, runA)
	if err != nil {
		t.Fatal(err)
	}
	after, _ := e.rdb.Time(t.Context()).Result()
	if entry.UpdatedAt.Before(before.Truncate(time.Millisecond)) || entry.UpdatedAt.After(after) {
		t.Fatalf("entry time %v is not Redis time (between %v and %v)", entry.UpdatedAt, before, after)
	}
	key := a.hb.Key(runA.Owner.Project, runA.WorkflowID)
	fields, err := e.rdb.HGetAll(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	decoded, err := heartbeat.Decode(e.pfx, key, fields)
	if err != nil {
		t.Fatal(err)
	}
	if decoded.RunID != runA.RunID || decoded.Token != termA.Token() || decoded.ServerID != "node-a" || decoded.UpdatedMs != entry.UpdatedMs {
		t.Fatalf("stored %+v, wrote %+v", decoded, entry)
	}
	if ttl, _ := e.rdb.PTTL(t.Context(), key).Result(); ttl <= 9*time.Hour {
		t.Fatalf("backstop TTL %v, want about 10h", ttl)
	}

	// node-b takes over with a newer token.
	if err := termA.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	termB, err := b.el.Campaign(t.Context(), p, "orders", b.id)
	if err != nil {
		t.Fatal(err)
	}
	runB, err := b.mgr.Take(t.Context(), termB)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.hb.Beat(t.Context(), termB, runB); err != nil {
		t.Fatal(err)
	}
	// The old term is over: nothing is written.
	if _, err := a.hb.Beat(t.Context(), termA, runA); !errors.Is(err, heartbeat.ErrNotLeader) {
		t.Fatalf("superseded term's Beat = %v, want ErrNotLeader", err)
	}
	// A paused old leader that does not know yet: the stored higher token refuses it.
	paused := pausedTerm{token: termA.Token(), id: "node-a", ctx: t.Context()}
	if _, err := a.hb.Beat(t.Context(), paused, runA); !errors.Is(err, heartbeat.ErrSuperseded) {
		t.Fatalf("lower token Beat = %v, want ErrSuperseded", err)
	}
	if err := a.hb.Run(t.Context(), paused, runA); !errors.Is(err, heartbeat.ErrSuperseded) {
		t.Fatalf("lower token Run = %v, want ErrSuperseded", err)
	}
	if v, _ := e.rdb.HGet(t.Context(), key, heartbeat.FieldRunID).Result(); v != runB.RunID {
		t.Fatalf("entry names run %s, want the successor's %s", v, runB.RunID)
	}
	// Clear by the old owner leaves the successor's entry alone; the successor's own Clear removes it.
	if err := a.hb.Clear(t.Context(), paused, runA); err != nil || !e.exists(t, key) {
		t.Fatalf("old owner's Clear: %v, key exists %v", err, e.exists(t, key))
	}
	if err := b.hb.Clear(t.Context(), termB, runB); err != nil || e.exists(t, key) {
		t.Fatalf("owner's Clear: %v, key exists %v", err, e.exists(t, key))
	}
}

// Garbage in the owner's own key (a key of another type, a hash with a non-numeric token) is replaced;
// Run stops when the term ends.
func TestHeartbeatReplacesGarbageAndStopsWithTheTerm(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: 100 * time.Millisecond})
	term, err := a.el.Campaign(t.Context(), p, "orders", a.id)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := takeover.WorkflowID(p, "orders")
	run := takeover.Run{WorkflowID: id, RunID: "run-1", Owner: takeover.Owner{Project: p, Queue: "orders", ServerID: a.id, Token: term.Token()}}
	key := a.hb.Key(p, id)
	for _, garbage := range []func() error{
		func() error { return e.rdb.Set(t.Context(), key, "not a hash", 0).Err() },
		func() error { return e.rdb.HSet(t.Context(), key, "token", "abc", "run_id", "x").Err() },
		func() error { return e.rdb.RPush(t.Context(), key, "a", "b").Err() },
	} {
		e.rdb.Del(t.Context(), key)
		if err := garbage(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.hb.Beat(t.Context(), term, run); err != nil {
			t.Fatalf("Beat over garbage: %v", err)
		}
		fields, _ := e.rdb.HGetAll(t.Context(), key).Result()
		if _, err := heartbeat.Decode(e.pfx, key, fields); err != nil {
			t.Fatalf("entry after Beat: %v", err)
		}
	}
	// A run of another term is refused outright.
	other := run
	other.Owner.Token++
	if _, err := a.hb.Beat(t.Context(), term, other); !errors.Is(err, heartbeat.ErrNotLeader) {
		t.Fatalf("Beat for another term's run = %v", err)
	}

	// Run writes at once: wait for that write, then end the term under it.
	if err := e.rdb.Del(t.Context(), key).Err(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- a.hb.Run(t.Context(), term, run) }()
	e.waitKey(t, key)
	if err := term.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run after the term ended = %v, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not stop when the term ended")
	}
}

// Redis down: Beat fails with a clear error naming the key, fast, without panicking.
func TestHeartbeatRedisDown(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	redisx.SkipExternal(t, e.redis)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: time.Second})
	term, err := a.el.Campaign(t.Context(), p, "orders", a.id)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := takeover.WorkflowID(p, "orders")
	run := takeover.Run{WorkflowID: id, RunID: "run-1", Owner: takeover.Owner{Project: p, Queue: "orders", ServerID: a.id, Token: term.Token()}}
	if err := e.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err = a.hb.Beat(t.Context(), term, run)
	if err == nil || !containsAll(err.Error(), "heartbeat: write", a.hb.Key(p, id)) {
		t.Fatalf("Beat with Redis down = %v", err)
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// After an etcd history regression (a restore without --bump-revision, a move to a new cluster) the
// confirmed term's token is lower than the one in its queue's heartbeat entry. The entry cannot be a
// successor's while etcd confirms the term: the write overwrites it and counts a regression, instead
// of giving way (ErrSuperseded), which made the queue change hands every few seconds.
func TestHeartbeatOverwritesAHigherTokenAfterARegression(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	p := project(t)
	a := e.owner(t, "node-a", election.Config{}, heartbeat.Config{Interval: time.Hour, KeyTTL: 10 * time.Hour})
	term, run, stop := a.lead(t, p, "orders")
	stop() // only the beats below write
	key := a.hb.Key(run.Owner.Project, run.WorkflowID)
	higher := term.Token() + 1_000_000
	if err := e.rdb.HSet(t.Context(), key, heartbeat.FieldWorkflowID, run.WorkflowID, heartbeat.FieldRunID, "run-before-the-restore",
		heartbeat.FieldServerID, "node-old", heartbeat.FieldToken, higher, heartbeat.FieldProject, p, heartbeat.FieldQueue, "orders",
		heartbeat.FieldUpdatedMs, 1).Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.hb.Beat(t.Context(), term, run); err != nil {
		t.Fatalf("Beat of a confirmed term over a higher token = %v, want the entry overwritten", err)
	}
	fields, err := e.rdb.HGetAll(t.Context(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if fields[heartbeat.FieldToken] != fmt.Sprint(term.Token()) || fields[heartbeat.FieldRunID] != run.RunID {
		t.Fatalf("entry %v, want the confirmed term's token %d and run %s", fields, term.Token(), run.RunID)
	}
	// A term etcd no longer confirms (a successor's entry) still gives way to a higher token.
	if err := e.rdb.HSet(t.Context(), key, heartbeat.FieldToken, higher).Err(); err != nil {
		t.Fatal(err)
	}
	paused := pausedTerm{token: term.Token(), id: "node-a", ctx: t.Context()}
	if _, err := a.hb.Beat(t.Context(), paused, run); !errors.Is(err, heartbeat.ErrSuperseded) {
		t.Fatalf("Beat of a term etcd no longer confirms = %v, want ErrSuperseded", err)
	}
	if got, _ := e.rdb.HGet(t.Context(), key, heartbeat.FieldToken).Result(); got != fmt.Sprint(higher) {
		t.Fatalf("entry token %s after a refused beat, want %d kept", got, higher)
	}
}

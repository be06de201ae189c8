package baton

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// recorder is a listener that records what it is told and can be held on one queue.
type recorder struct {
	mu      sync.Mutex
	got     map[string][]string
	changed chan struct{}
	hold    map[string]chan struct{} // a started event on the queue blocks until it is closed
	ctxs    map[string][]context.Context
}

func newRecorder(held ...string) *recorder {
	r := &recorder{got: map[string][]string{}, changed: make(chan struct{}, 1), hold: map[string]chan struct{}{},
		ctxs: map[string][]context.Context{}}
	for _, q := range held {
		r.hold[q] = make(chan struct{})
	}
	return r
}

func (r *recorder) add(queue, what string) {
	r.mu.Lock()
	r.got[queue] = append(r.got[queue], what)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *recorder) listener() Listener {
	return Listener{
		OnStartedLeading: func(ctx context.Context, l Lead) {
			r.mu.Lock()
			r.ctxs[l.Queue] = append(r.ctxs[l.Queue], ctx)
			r.mu.Unlock()
			r.add(l.Queue, fmt.Sprintf("start %d %s", l.Token, l.Run.RunID))
			if h, ok := r.hold[l.Queue]; ok {
				<-h
			}
		},
		OnStoppedLeading: func(q string, cause error) { r.add(q, "stop "+cause.Error()) },
		OnNewLeader:      func(q string, l election.Leader) { r.add(q, "leader "+l.ID) },
	}
}

// await waits until queue's events are want.
func (r *recorder) await(t *testing.T, queue string, want ...string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		r.mu.Lock()
		got := slices.Clone(r.got[queue])
		r.mu.Unlock()
		if slices.Equal(got, want) {
			return
		}
		select {
		case <-r.changed:
		case <-timeout:
			t.Fatalf("queue %s: got events %q, want %q", queue, got, want)
		}
	}
}

func started(ctx context.Context, queue string, token int64, run string) leadershipEvent {
	return leadershipEvent{kind: eventStarted, ctx: ctx, lead: Lead{Queue: queue, Token: token, Run: takeover.Run{RunID: run}}}
}

func stopped(cause string) leadershipEvent {
	return leadershipEvent{kind: eventStopped, cause: errors.New(cause)}
}

// A listener held in OnStartedLeading blocks neither the emitter (the election) nor other queues; its
// own queue's events follow in order once it returns, and a short term's start is still reported,
// with its context already cancelled.
func TestNotifierNeverBlocksAndKeepsOrderPerQueue(t *testing.T) {
	r := newRecorder("orders")
	nt := &notifier{listeners: []Listener{r.listener()}}
	term1, end1 := context.WithCancel(t.Context())
	term2, end2 := context.WithCancel(t.Context())
	nt.emit("orders", started(term1, "orders", 5, "r1"))
	r.await(t, "orders", "start 5 r1") // held from here on

	// Term 1 ends and a short term 2 comes and goes while the listener is held: emit returns at once.
	end1()
	nt.emit("orders", stopped("resigned"))
	nt.emit("orders", started(term2, "orders", 9, "r2"))
	end2()
	nt.emit("orders", stopped("lease lost"))
	nt.emit("refunds", started(t.Context(), "refunds", 6, "r3"))
	r.await(t, "refunds", "start 6 r3") // another queue is not held up

	close(r.hold["orders"])
	r.await(t, "orders", "start 5 r1", "stop resigned", "start 9 r2", "stop lease lost")
	if err := nt.wait(t.Context()); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if ctx := r.ctxs["orders"][1]; ctx.Err() == nil {
		t.Error("the short term's OnStartedLeading got a live context after the term ended")
	}
}

// Leader changes a held listener has not received are merged into the latest; start and stop events
// are never merged.
func TestNotifierMergesPendingLeaderChanges(t *testing.T) {
	r := newRecorder("orders")
	nt := &notifier{listeners: []Listener{r.listener()}}
	nt.emit("orders", started(t.Context(), "orders", 1, "r1"))
	r.await(t, "orders", "start 1 r1")
	for _, id := range []string{"a", "b", "c"} {
		nt.emit("orders", leadershipEvent{kind: eventNewLeader, leader: election.Leader{ID: id}})
	}
	nt.emit("orders", stopped("resigned"))
	nt.emit("orders", leadershipEvent{kind: eventNewLeader, leader: election.Leader{ID: "d"}})
	close(r.hold["orders"])
	r.await(t, "orders", "start 1 r1", "leader c", "stop resigned", "leader d")
	if err := nt.wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// wait is bounded by its context while a callback is stuck, and a listener without a callback for an
// event kind is skipped.
func TestNotifierWaitIsBounded(t *testing.T) {
	r := newRecorder("orders")
	partial := newRecorder()
	nt := &notifier{listeners: []Listener{r.listener(), {OnNewLeader: partial.listener().OnNewLeader}}}
	nt.emit("orders", started(t.Context(), "orders", 1, "r1"))
	nt.emit("orders", leadershipEvent{kind: eventNewLeader, leader: election.Leader{ID: "w1"}})
	r.await(t, "orders", "start 1 r1")
	partial.await(t, "orders", "leader w1")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := nt.wait(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("wait with a stuck callback and an ended context = %v, want context.Canceled", err)
	}
	close(r.hold["orders"])
	if err := nt.wait(t.Context()); err != nil {
		t.Fatal(err)
	}
}

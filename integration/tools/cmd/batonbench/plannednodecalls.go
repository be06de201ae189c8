package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/takeover"
)

// callLog records every handler call: by whom, when it began and ended, and how many calls of the
// same key ran at once. Its handler takes d whatever its context says (a call into a slow system that
// cannot be interrupted), the hardest case for a move.
type callLog struct {
	d       time.Duration
	reached chan struct{} // closed as call nodeMoveOnCall begins

	mu       sync.Mutex
	calls    map[string][]handlerCall
	inFlight map[string]int
	peak     map[string]int
	begun    int
	runs     int // calls running
}

type handlerCall struct {
	server       string
	began, ended time.Time
}

func newCallLog(d time.Duration) *callLog {
	return &callLog{d: d, reached: make(chan struct{}), calls: map[string][]handlerCall{},
		inFlight: map[string]int{}, peak: map[string]int{}}
}

func (l *callLog) handle(_ context.Context, key string, _ dispatcher.Request, owner takeover.Owner) error {
	l.mu.Lock()
	i := len(l.calls[key])
	l.calls[key] = append(l.calls[key], handlerCall{server: owner.ServerID, began: time.Now()})
	l.inFlight[key]++
	l.peak[key] = max(l.peak[key], l.inFlight[key])
	l.runs++
	if l.begun++; l.begun == nodeMoveOnCall {
		close(l.reached)
	}
	l.mu.Unlock()
	time.Sleep(l.d)
	l.mu.Lock()
	l.calls[key][i].ended = time.Now()
	l.inFlight[key]--
	l.runs--
	l.mu.Unlock()
	return nil
}

// running is how many calls run now.
func (l *callLog) running() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs
}

// idle waits, at most bound, until no call runs.
func (l *callLog) idle(ctx context.Context, bound time.Duration) error {
	return harness.Poll(context.WithoutCancel(ctx), bound, 50*time.Millisecond, func() error {
		if n := l.running(); n > 0 {
			return fmt.Errorf("%d handler calls still running", n)
		}
		return nil
	})
}

// of returns key's calls and the most of them that ran at once.
func (l *callLog) of(key string) ([]handlerCall, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls[key]), l.peak[key]
}

// remainderAt is how long, after t, the calls begun before t went on running: no planned move that
// began at t can end before they did (or before its quiesce gave up on them).
func (l *callLog) remainderAt(t time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	var most time.Duration
	for _, calls := range l.calls {
		for _, call := range calls {
			end := call.ended
			if end.IsZero() {
				end = time.Now()
			}
			if call.began.Before(t) {
				most = max(most, end.Sub(t))
			}
		}
	}
	return most
}

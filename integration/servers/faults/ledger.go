// Package faults holds the faults that Baton's tests and tools plant in what a worker depends on,
// where cutting a real server is not the point: the tests of a behaviour and the bench that times it
// plant the same fault.
package faults

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/takeover"
)

// ErrLedgerDown is what Ledger's writes fail with while Failing is set: a retryable error, as of a
// ledger whose store does not answer.
var ErrLedgerDown = errors.New("faults: dispatch ledger store unavailable (planted)")

// Ledger is a dispatch ledger in memory whose every write fails with ErrLedgerDown while Failing is
// set (the dispatch activity then fails attempt after attempt), and that otherwise remembers which
// keys are done.
type Ledger struct {
	Failing atomic.Bool
	done    sync.Map
}

var _ dispatcher.Ledger = (*Ledger)(nil)

// Begin reports whether key is done.
func (l *Ledger) Begin(_ context.Context, key string, _ takeover.Owner) (bool, error) {
	if l.Failing.Load() {
		return false, ErrLedgerDown
	}
	_, done := l.done.Load(key)
	return done, nil
}

// Complete marks key done.
func (l *Ledger) Complete(_ context.Context, key string, _ takeover.Owner) error {
	if l.Failing.Load() {
		return ErrLedgerDown
	}
	l.done.Store(key, true)
	return nil
}

package ledger

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
)

// The ledger ages a failing streak on its clock: Check turns red exactly FailingAfter after the
// first failure, by the fake clock, however long the test itself takes.
func TestLedgerFailingStreakOnItsClock(t *testing.T) {
	fake := clock.NewFake(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	l := &Etcd{prefix: DefaultPrefix, clock: fake}
	l.noteWrite(errors.New("etcd unreachable"))
	fake.Advance(FailingAfter - 1)
	if err := l.Check(); err != nil {
		t.Fatalf("failing for less than FailingAfter: Check() = %v", err)
	}
	fake.Advance(1)
	if err := l.Check(); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("failing for FailingAfter: Check() = %v, want ErrUnavailable", err)
	}
	l.noteWrite(nil)
	if err := l.Check(); err != nil {
		t.Fatalf("after a write went through: Check() = %v", err)
	}
}

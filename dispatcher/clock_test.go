package dispatcher

import (
	"errors"
	"testing"
	"time"

	"github.com/baton-run/baton/clock"
)

// The ledger ages a failing streak on its clock: Check turns red exactly LedgerFailingAfter after the
// first failure, by the fake clock, however long the test itself takes.
func TestLedgerFailingStreakOnItsClock(t *testing.T) {
	fake := clock.NewFake(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC))
	l := &EtcdLedger{prefix: DefaultLedgerPrefix}
	l.SetClock(fake)
	l.noteWrite(errors.New("etcd unreachable"))
	fake.Advance(LedgerFailingAfter - 1)
	if err := l.Check(); err != nil {
		t.Fatalf("failing for less than LedgerFailingAfter: Check() = %v", err)
	}
	fake.Advance(1)
	if err := l.Check(); !errors.Is(err, ErrLedgerUnavailable) {
		t.Fatalf("failing for LedgerFailingAfter: Check() = %v, want ErrLedgerUnavailable", err)
	}
	l.noteWrite(nil)
	if err := l.Check(); err != nil {
		t.Fatalf("after a write went through: Check() = %v", err)
	}
}

package ledger

import (
	"strings"
	"testing"
)

// A project's range covers its own keys and no other project's, however the names start; the old
// layout's range (the upgrade's read grant) covers no project's keys and every old record.
func TestLedgerKeysKeepProjectsApart(t *testing.T) {
	key := strings.Repeat("ab", DispatchKeyLen/2) // a dispatch key's shape (IsDispatchKey)
	pay, payments := Range("", "pay"), Range("", "payments")
	if pay != "/baton/dispatch/p/pay/" || Key("", "pay", key) != pay+key || AttemptKey("", "pay", key) != pay+"attempt/"+key {
		t.Fatalf("layout: range %q, key %q, attempt %q", pay, Key("", "pay", key), AttemptKey("", "pay", key))
	}
	if strings.HasPrefix(Key("", "payments", key), pay) || strings.HasPrefix(Key("", "pay", key), payments) {
		t.Fatalf("range %q and %q overlap", pay, payments)
	}
	start, end := LegacyRange("")
	in := func(k string) bool { return k >= start && k < end }
	for _, project := range []string{"0", "attempt", "f", "p", "zz"} {
		if k := Key("", project, key); in(k) {
			t.Errorf("project %q's key %s lies in the old layout's range [%s, %s)", project, k, start, end)
		}
	}
	for _, k := range []string{LegacyKey("", key), LegacyKey("", strings.Repeat("0", DispatchKeyLen)), LegacyKey("", strings.Repeat("f", DispatchKeyLen))} {
		if !in(k) {
			t.Errorf("old record %s is not in [%s, %s)", k, start, end)
		}
	}
}

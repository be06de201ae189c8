package dispatcher

import (
	"strings"
	"testing"
)

// A project's range covers its own keys and no other project's, however the names start; the old
// layout's range (the upgrade's read grant) covers no project's keys and every old record.
func TestLedgerKeysKeepProjectsApart(t *testing.T) {
	key := Request{Type: "t", TaskID: "1", PayloadSHA256: strings.Repeat("ab", 32)}.Key()
	pay, payments := LedgerRange("", "pay"), LedgerRange("", "payments")
	if pay != "/baton/dispatch/p/pay/" || LedgerKey("", "pay", key) != pay+key || LedgerAttemptKey("", "pay", key) != pay+"attempt/"+key {
		t.Fatalf("layout: range %q, key %q, attempt %q", pay, LedgerKey("", "pay", key), LedgerAttemptKey("", "pay", key))
	}
	if strings.HasPrefix(LedgerKey("", "payments", key), pay) || strings.HasPrefix(LedgerKey("", "pay", key), payments) {
		t.Fatalf("range %q and %q overlap", pay, payments)
	}
	start, end := LegacyLedgerRange("")
	in := func(k string) bool { return k >= start && k < end }
	for _, project := range []string{"0", "attempt", "f", "p", "zz"} {
		if k := LedgerKey("", project, key); in(k) {
			t.Errorf("project %q's key %s lies in the old layout's range [%s, %s)", project, k, start, end)
		}
	}
	for _, k := range []string{LegacyLedgerKey("", key), LegacyLedgerKey("", strings.Repeat("0", KeyLen)), LegacyLedgerKey("", strings.Repeat("f", KeyLen))} {
		if !in(k) {
			t.Errorf("old record %s is not in [%s, %s)", k, start, end)
		}
	}
}

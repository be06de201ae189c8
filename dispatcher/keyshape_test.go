package dispatcher

import (
	"testing"

	"github.com/baton-run/baton/ledger"
)

func TestIsKeyAcceptsWhatKeyMakes(t *testing.T) {
	k := Request{Type: "t", TaskID: "task-1", PayloadSHA256: "ABCDEF" + "0123456789abcdef0123456789abcdef0123456789abcdef0123456789"}.Key()
	if !ledger.IsDispatchKey(k) {
		t.Fatalf("ledger.IsDispatchKey(%q) = false for a Request.Key", k)
	}
	for _, s := range []string{"", "task-1", k[:63], k + "0", "ABCDEF" + k[6:], "g" + k[1:]} {
		if ledger.IsDispatchKey(s) {
			t.Errorf("ledger.IsDispatchKey(%q) = true", s)
		}
	}
}

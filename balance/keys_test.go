package balance

import (
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestKeysLayout(t *testing.T) {
	k := Keys{ElectionPrefix: "/e"}
	for got, want := range map[string]string{
		k.Project("p"):        "/e-balance/p/",
		k.Member("p", "w1"):   "/e-balance/p/m/w1",
		k.Members("p"):        "/e-balance/p/m/",
		k.Hint("p", "q1"):     "/e-balance/p/h/q1",
		k.Hints("p"):          "/e-balance/p/h/",
		k.Transfer("p", "q1"): "/e-balance/p/t/q1",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

// A transfer request is seen by every worker; only a worker other than its target acts on it, so the
// target, once it leads, keeps the queue; a deleted or unreadable request is gone.
func TestRosterTransfers(t *testing.T) {
	k := Keys{ElectionPrefix: "/e"}
	for self, acts := range map[string]bool{"w1": true, "w2": false} {
		r := newRoster(k, "p", self, "", 10*time.Second, zap.NewNop(), func() {}, func(string) {})
		if q := r.apply(k.Transfer("p", "q1"), []byte(`{"to":"w2"}`), false); q != "q1" {
			t.Fatalf("apply returned %q, want q1 (its queue wakes)", q)
		}
		if to, ok := r.transferTo("q1"); to != "w2" || ok != acts {
			t.Errorf("%s: transferTo = %q, %v; want w2, %v", self, to, ok, acts)
		}
		r.apply(k.Transfer("p", "q1"), nil, true)
		if _, ok := r.transferTo("q1"); ok {
			t.Errorf("%s: a deleted request still acts", self)
		}
		r.apply(k.Transfer("p", "q1"), []byte(`garbage`), false)
		if _, ok := r.transferTo("q1"); ok {
			t.Errorf("%s: an unreadable request acts", self)
		}
	}
}

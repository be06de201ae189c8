package election

import "testing"

func TestKeysLayout(t *testing.T) {
	k := Keys{Prefix: "/baton/election"}
	if got := k.Election("billing", "q1"); got != "/baton/election/billing/q1" {
		t.Fatalf("Election = %q", got)
	}
	if got := k.Candidates("billing", "q1"); got != "/baton/election/billing/q1/" {
		t.Fatalf("Candidates = %q", got)
	}
	if got := k.Project("billing"); got != "/baton/election/billing/" {
		t.Fatalf("Project = %q", got)
	}
	for key, want := range map[string]string{
		"/baton/election/billing/q1/694d9a8b3c2e1f00": "q1",
		"/baton/election/billing/q1":                  "", // the election, not a candidate
		"/baton/election/billing/q1/":                 "",
		"/baton/election/billing/q1/a/b":              "",
		"/baton/election/billingx/q1/694d":            "",
		"/baton/election/other/q1/694d":               "",
	} {
		if got, ok := k.Queue("billing", key); got != want || ok != (want != "") {
			t.Errorf("Queue(%q) = %q, %v; want %q", key, got, ok, want)
		}
	}
	// A candidate key Campaign writes is one Queue reads back.
	e := &Elector{cfg: Config{Prefix: "/p"}}
	if q, ok := e.Keys().Queue("proj", e.ElectionKey("proj", "orders")+"/"+leaseHex(0x1234)); !ok || q != "orders" {
		t.Fatalf("round trip: %q %v", q, ok)
	}
}

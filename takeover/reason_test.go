package takeover

import (
	"testing"
	"time"
)

// Every reason Baton writes reads back to the same fields; nothing else reads as Baton's.
func TestReasonRoundTrip(t *testing.T) {
	for _, r := range []Reason{
		{Kind: ReasonTakenOver, By: "node-b", Token: 20},
		{Kind: ReasonSteppedDown, By: "node-a", Token: 10},
		{Kind: ReasonLateStart, By: "node-a", Token: 12},
		{Kind: ReasonStaleHeartbeat, By: "rec-1", Token: 3, Owner: "node-a", OwnerToken: 10, Stale: 1500 * time.Millisecond},
		{Kind: ReasonNoLiveOwner, By: "rec-1", Token: 3, Owner: "node-a", OwnerToken: 11},
	} {
		got, ok := ParseReason(r.String())
		if !ok || got != r {
			t.Errorf("ParseReason(%q) = %+v, %v; want %+v", r.String(), got, ok, r)
		}
	}
	for _, s := range []string{
		"", "terminated by WorkflowIDConflictPolicy", "baton: ", "baton: taken over by b",
		"baton: taken over by b (token 20) and more", "baton: taken over by b (token x)",
		"baton: reconciler c (token 3): heartbeat of a (token 10) stale for soon",
		"operator: a stepped down (token 10)",
	} {
		if r, ok := ParseReason(s); ok {
			t.Errorf("ParseReason(%q) = %+v: not a reason Baton writes", s, r)
		}
	}
	// The texts Baton wrote before Reason existed read back the same.
	if r, ok := ParseReason("baton: reconciler c (token 3): heartbeat of a (token 10) stale for 2m3.5s"); !ok ||
		r.Kind != ReasonStaleHeartbeat || r.OwnerToken != 10 || r.Stale != 123500*time.Millisecond {
		t.Errorf("a stale-heartbeat reason: %+v %v", r, ok)
	}
	if tok, ok := (Reason{Kind: ReasonTakenOver, Token: 5}).RunToken(); ok {
		t.Errorf("a takeover's reason names its own token, not the run's (%d)", tok)
	}
}

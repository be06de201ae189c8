package balance

import (
	"testing"
	"time"
)

// The count of held records follows the terms: a term started twice is one, a term ended twice (or
// never started) takes nothing off, and heldSince is the current term's start.
func TestRecordHeldCount(t *testing.T) {
	r, fake := fakeRunner("w0", []string{"a", "b"}, "w0")
	type want struct {
		leading int
		since   time.Duration // of a; -1: zero
	}
	steps := []struct {
		name  string
		queue string
		held  bool
		want  want
	}{
		{"a won", "a", true, want{1, 0}},
		{"a won again (a new term)", "a", true, want{1, time.Second}},
		{"b won", "b", true, want{2, time.Second}},
		{"a lost", "a", false, want{1, -1}},
		{"a lost again", "a", false, want{1, -1}},
		{"c, never held, lost", "c", false, want{1, -1}},
		{"b lost", "b", false, want{0, -1}},
	}
	for i, s := range steps {
		if i > 0 {
			fake.Advance(time.Second)
		}
		r.setHeld(s.queue, s.held)
		rec := r.snapshot("a")
		since := time.Duration(-1)
		if !rec.heldSince.IsZero() {
			since = rec.heldSince.Sub(t0)
		}
		if got := (want{r.Leading(), since}); got != s.want {
			t.Fatalf("%s: leading %d, a held since %v; want %+v", s.name, got.leading, got.since, s.want)
		}
		if rec.held != !rec.heldSince.IsZero() {
			t.Fatalf("%s: a held %v but since %v", s.name, rec.held, rec.heldSince)
		}
	}
}

// Takeovers nest, and a done called twice ends one takeover only.
func TestTakingOverNests(t *testing.T) {
	r, _ := fakeRunner("w0", []string{"a"}, "w0")
	first, second := r.TakingOver("a"), r.TakingOver("a")
	first()
	first()
	if n := r.snapshot("a").takeovers; n != 1 {
		t.Fatalf("after one of two takeovers ended (its done called twice): %d under way, want 1", n)
	}
	second()
	if n := r.snapshot("a").takeovers; n != 0 {
		t.Fatalf("after both ended: %d under way, want 0", n)
	}
}

// An unfit leader hands its queue over to a worker in line once per UnfitPause, and without one asks
// the queue's workers to stand, once per Grace; Fit ends the mark, and lastLeader and the unfit times
// outlive it.
func TestUnfitMoveRecords(t *testing.T) {
	r, fake := fakeRunner("w0", []string{"a"}, "w0", "w1")
	r.view.apply("/e/p/a/1", "w0", 1, false)
	r.setHeld("a", true)
	if unfit, move := r.unfitMove(t.Context(), "a"); unfit || move {
		t.Fatalf("fit: unfit %v, move %v", unfit, move)
	}
	r.Unfit("a")
	if unfit, move := r.unfitMove(t.Context(), "a"); !unfit || move || !r.snapshot("a").unfitAsked.Equal(fake.Now()) {
		t.Fatalf("unfit, nobody in line: unfit %v, move %v, asked at %v; want an ask now", unfit, move, r.snapshot("a").unfitAsked)
	}
	asked := fake.Now()
	fake.Advance(r.cfg.Grace - time.Nanosecond)
	r.unfitMove(t.Context(), "a")
	if !r.snapshot("a").unfitAsked.Equal(asked) {
		t.Fatal("asked again within Grace")
	}
	fake.Advance(time.Nanosecond)
	r.unfitMove(t.Context(), "a")
	if !r.snapshot("a").unfitAsked.Equal(fake.Now()) {
		t.Fatal("not asked again after Grace")
	}
	r.view.apply("/e/p/a/2", "w1", 2, false)
	if _, move := r.unfitMove(t.Context(), "a"); !move || !r.snapshot("a").unfitMoved.Equal(fake.Now()) {
		t.Fatalf("unfit, w1 in line: move %v, moved at %v", move, r.snapshot("a").unfitMoved)
	}
	fake.Advance(UnfitPause - time.Nanosecond)
	if unfit, move := r.unfitMove(t.Context(), "a"); !unfit || move {
		t.Fatalf("just under UnfitPause after the move: unfit %v, move %v; want kept", unfit, move)
	}
	fake.Advance(time.Nanosecond)
	if _, move := r.unfitMove(t.Context(), "a"); !move {
		t.Fatal("UnfitPause after the move: kept")
	}
	r.Fit("a")
	if rec := r.snapshot("a"); rec.unfit || rec.unfitMoved.IsZero() || rec.unfitAsked.IsZero() {
		t.Fatalf("after Fit: %+v; want the mark gone and its times kept", rec)
	}
}

// The successor counts the queues this worker named it for during 2 × Grace: two equal workers take
// turns, and a naming older than that no longer counts.
func TestSuccessorCountsRecentNamings(t *testing.T) {
	r, fake := fakeRunner("w0", []string{"a"}, "w0")
	r.roster.members["w1"] = member{Since: 1}
	r.roster.members["w2"] = member{Since: 2}
	picks := []string{r.successor(nil), r.successor(nil), r.successor(nil)}
	if picks[0] != "w1" || picks[1] != "w2" || picks[2] != "w1" {
		t.Fatalf("picks %v, want w1 (oldest), w2 (w1 named once), w1 (a tie, oldest)", picks)
	}
	fake.Advance(2 * r.cfg.Grace)
	if got := r.successor(nil); got != "w2" {
		t.Fatalf("2 × Grace later: %q, want w2 (w1 named twice, w2 once, still counted)", got)
	}
	fake.Advance(time.Nanosecond)
	if got := r.successor(nil); got != "w1" {
		t.Fatalf("just after 2 × Grace: %q, want w1 (its namings forgotten, w2's last one still counted)", got)
	}
}

// mayStandIn records who leads a queue this worker does not, so that a term it wins later is counted
// as an owner change from that leader.
func TestMayStandInRecordsTheLeader(t *testing.T) {
	r, _ := fakeRunner("w0", []string{"a"}, "w0", "w1")
	r.view.apply("/e/p/a/1", "w1", 1, false)
	r.mayStand("a")
	if got := r.snapshot("a").lastLeader; got != "w1" {
		t.Fatalf("lastLeader %q, want w1", got)
	}
}

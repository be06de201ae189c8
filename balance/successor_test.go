package balance

import (
	"fmt"
	"testing"
)

// Who a hand-off names, as the Runner gathers it: the successor among the workers in lines and the
// live member records (one that stands nowhere yet included, one whose keys all went not), and for a
// drain or an unfit hand-over the first taker in the queue's own line, never a better successor that
// does not serve the queue; an operator's transfer names its target.
func TestNameFor(t *testing.T) {
	for _, tc := range []struct {
		name   string
		build  func(f *fleet)
		reason string
		want   string
	}{
		{"shed: the lighter worker in line", func(f *fleet) {
			f.member("w1", "v1", false).member("w2", "v1", false).line("a", "w0", "w1", "w2").line("b", "w1")
		}, ReasonShed, "w2"},
		{"shed: not a lighter worker that stands nowhere (it may not serve the queue)", func(f *fleet) {
			f.member("w1", "v1", false).member("w3", "v1", false).line("a", "w0", "w1").line("b", "w1")
		}, ReasonShed, "w1"},
		{"shed: the lighter of the line, past a lighter worker that stands only elsewhere", func(f *fleet) {
			f.member("w1", "v1", false).member("w3", "v1", false).line("b", "w1").line("c", "w1", "w3")
			f.member("w2", "v1", false).line("a", "w0", "w1", "w2") // w3 idle and older than w2
		}, ReasonShed, "w2"},
		{"shed: not a draining worker in line, though it is the lightest", func(f *fleet) {
			f.member("w1", "v1", true).member("w2", "v1", false).line("a", "w0", "w1", "w2").line("b", "w2")
		}, ReasonShed, "w2"},
		{"shed: forward only within the line", func(f *fleet) {
			f.member("w0", "v2", false).member("w1", "v1", false).member("w2", "v2", false).
				line("a", "w0", "w1", "w2").line("b", "w2").line("c", "w2")
		}, ReasonShed, "w2"},
		{"shed: nobody in line but draining workers, nobody named", func(f *fleet) {
			f.member("w1", "v1", true).member("w3", "v1", false).line("a", "w0", "w1")
		}, ReasonShed, ""},
		{"resign: a worker that stands nowhere yet", func(f *fleet) {
			f.member("w1", "v1", false).member("w3", "v1", false).line("a", "w0", "w1").line("b", "w1")
		}, ReasonResign, "w3"},
		{"resign during a rollout: the newer worker, though it stands nowhere", func(f *fleet) {
			f.member("w1", "v1", false).member("w3", "v2", false).line("a", "w0", "w1")
		}, ReasonRollout, "w3"},
		{"resign: not a worker whose keys all went", func(f *fleet) {
			f.member("w1", "v1", false).member("w3", "v1", false).line("a", "w0", "w1").line("b", "w1").line("c", "w3")
			f.r.view.apply(fmt.Sprintf("/e/p/c/%d", f.rev), "", 0, true)
		}, ReasonResign, "w1"},
		{"resign: not a draining worker", func(f *fleet) {
			f.member("w1", "v1", true).member("w2", "v1", false).line("a", "w0", "w1", "w2").line("b", "w2").line("c", "w2")
		}, ReasonResign, "w2"},
		{"drain: the taker in line, not a newer idle worker", func(f *fleet) {
			f.member("w1", "v1", false).member("w3", "v2", false).line("a", "w0", "w1")
		}, ReasonDrain, "w1"},
		{"drain: nobody in line, nobody named", func(f *fleet) {
			f.member("w3", "v1", false).line("a", "w0")
		}, ReasonDrain, ""},
		{"unfit: the taker in line past a draining one", func(f *fleet) {
			f.member("w1", "v1", true).member("w2", "v1", false).line("a", "w0", "w1", "w2")
		}, ReasonUnfit, "w2"},
		{"transfer: the operator's target", func(f *fleet) {
			f.member("w1", "v1", false).member("w2", "v1", false).line("a", "w0", "w1", "w2")
			f.r.roster.transfers["a"] = TransferRequest{To: "w2"}
		}, ReasonTransfer, "w2"},
		{"a transfer to this worker: the successor", func(f *fleet) {
			f.member("w1", "v1", false).line("a", "w0", "w1")
			f.r.roster.transfers["a"] = TransferRequest{To: "w0"}
		}, ReasonTransfer, "w1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFleet(t, "a", "b", "c")
			f.member("w0", "v1", false)
			tc.build(f)
			if got := f.r.nameFor("a", tc.reason); got != tc.want {
				t.Fatalf("nameFor(a, %s) = %q, want %q", tc.reason, got, tc.want)
			}
		})
	}
}

// Sheds of several queues name successors among each queue's own line and count the namings: two
// equal workers in both lines take turns, and a worker that is in neither line, however idle, is never
// named (the simulator's balance world: a shed named such a worker, and the queue came back).
func TestShedsTakeTurnsWithinTheLine(t *testing.T) {
	f := newFleet(t, "a", "b", "c")
	f.member("w0", "v1", false).member("w1", "v1", false).member("w2", "v1", false).member("idle", "v1", false)
	f.line("a", "w0", "w1", "w2").line("b", "w0", "w1", "w2").line("c", "w0", "w1", "w2")
	var picks []string
	for _, q := range []string{"a", "b", "c"} {
		picks = append(picks, f.r.nameFor(q, ReasonShed))
	}
	if picks[0] == "idle" || picks[1] == "idle" || picks[2] == "idle" {
		t.Fatalf("sheds named %v: a worker in no line", picks)
	}
	if picks[0] == picks[1] || picks[2] != picks[0] {
		t.Fatalf("sheds named %v, want two equal workers taking turns", picks)
	}
	if got := f.r.nameFor("a", ReasonResign); got != "idle" {
		t.Fatalf("a stop named %q, want the idle member (a stop names among every worker)", got)
	}
}

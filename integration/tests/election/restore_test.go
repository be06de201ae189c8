package election_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	batonledger "github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// A restore can bring a predecessor's key back (found by the simulator's election world, seed 0x56):
// node-a leads and node-b waits when the backup is taken; an operator deletes node-a's key while
// node-a is cut off, and what etcd sent it is lost in the restart, so node-b wins; etcd is then restored from the backup
// (with or without --bump-revision). Both keys are back, node-a's older, and node-a's lease with them:
// node-a's term goes on, and so would node-b's, whose own key still has its token. Only one of them
// may pass Guard: the one whose key leads (the oldest), node-a.
func TestRestoredPredecessorKeyFencesTheSuccessor(t *testing.T) {
	for _, bump := range []uint64{0, 1000} {
		t.Run(fmt.Sprintf("bump=%d", bump), func(t *testing.T) {
			c := etcdx.Start(t, etcdx.Options{})
			proxy := etcdx.NewTestProxy(t, c.MemberEndpoint(0))
			// A lease far longer than the schedule: node-a is cut off from its first keepalive lost to the
			// end of the test, and clients reconnect to the restarted cluster with gRPC's backoff (up to
			// 20 s seen on a loaded machine); its term must outlive that for the schedule to happen.
			cfg := election.Config{TTL: 2 * time.Minute, AllowLongTTL: true}
			a := newCandidate(t, c, "node-a", cfg, proxy.URL())
			b := newCandidate(t, c, "node-b", cfg)
			operator := etcdx.Client(t, c)

			aTerm, err := a.el.Campaign(t.Context(), project, "restored", a.id)
			if err != nil {
				t.Fatal(err)
			}
			bTerms := make(chan *election.Term, 1)
			go func() {
				term, err := b.el.Campaign(t.Context(), project, "restored", b.id)
				if err != nil {
					t.Errorf("node-b campaign: %v", err)
					close(bTerms)
					return
				}
				bTerms <- term
			}()
			waitCandidates(t, operator, a.el.ElectionKey(project, "restored"), 2, 10*time.Second)
			backup, err := c.SaveSnapshot(t.Context(), operator)
			if err != nil {
				t.Fatal(err)
			}
			proxy.Drop() // what etcd sends node-a from now on is lost: it never hears of the delete
			if _, err := operator.Delete(t.Context(), aTerm.Key()); err != nil {
				t.Fatal(err)
			}
			t.Logf("node-a's key deleted; waiting for node-b's term")
			bTerm := <-bTerms
			if bTerm == nil {
				t.FailNow()
			}
			t.Logf("node-b won (token %d); restoring", bTerm.Token())
			if err := c.Restore(backup, etcdx.RestoreOptions{BumpRevision: bump, MarkCompacted: bump > 0}); err != nil {
				t.Fatal(err)
			}
			show, cancel := context.WithTimeout(t.Context(), 2*time.Second) // for the log only
			defer cancel()
			if g, err := operator.Get(show, a.el.ElectionKey(project, "restored")+"/", clientv3.WithPrefix()); err == nil {
				for _, kv := range g.Kvs {
					t.Logf("after the restore: %s c%d lease %x (a %s token %d, b %s token %d)", kv.Key, kv.CreateRevision, kv.Lease, aTerm.Key(), aTerm.Token(), bTerm.Key(), bTerm.Token())
				}
			}
			t.Logf("restored")
			proxy.Heal()
			if aTerm.Check() != nil {
				// Its lease (TTL 2 min) outlives the cut and the restore by far; an end here is a failure to
				// build the schedule, reported, never passed over.
				t.Fatalf("node-a's term ended before the restore was over (%v): the schedule did not happen", aTerm.Err())
			}
			// The ledger's fenced writes and ConfirmOwner decide as Guard does (before Guard, whose refusal
			// ends node-b's term and may delete its key).
			ledgerDecides(t, operator, aTerm, bTerm)
			aErr := guardAnswered(t, aTerm, "a")
			bErr := guardAnswered(t, bTerm, "b")
			if aErr == nil && bErr == nil {
				t.Fatalf("after the restore both node-a (token %d) and node-b (token %d) passed Guard: two owners", aTerm.Token(), bTerm.Token())
			}
			if aErr != nil {
				t.Fatalf("node-a, whose restored key is the oldest, failed Guard: %v (term: %v)", aErr, aTerm.Err())
			}
			if bTerm.Err() == nil {
				t.Fatalf("node-b's term goes on after its Guard was refused")
			}
		})
	}
}

// guardAnswered is a guarded write of term retried while etcd gives no answer (answered): nil, or the
// error of the answer.
func guardAnswered(t *testing.T, term *election.Term, value string) error {
	return answered(func() error {
		_, err := term.Guard(t.Context(), clientv3.OpPut("/fence/restored", value))
		if err != nil && term.Err() != nil && !errors.Is(err, election.ErrNotLeader) {
			return fmt.Errorf("%w: %w", errAnswered, err) // the term ended: an answer all the same
		}
		return err
	}, election.ErrNotLeader)
}

// ledgerDecides checks that a dispatcher run of node-b (the successor) is refused by the ledger and
// by batonledger.ConfirmOwner once etcd holds node-a's older key again, and that node-a's is accepted:
// OwnerCmp alone, which compares each owner's own key, let both act.
func ledgerDecides(t *testing.T, c *clientv3.Client, aTerm, bTerm *election.Term) {
	t.Helper()
	l, err := batonledger.New(c, batonledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	owner := func(id string, term *election.Term) takeover.Owner {
		return takeover.Owner{Project: project, Queue: "restored", ServerID: id, Token: term.Token(), ElectionKey: term.Key()}
	}
	for _, tc := range []struct {
		who        string
		owner      takeover.Owner
		superseded bool
	}{{"node-b", owner("node-b", bTerm), true}, {"node-a", owner("node-a", aTerm), false}} {
		confirmErr := answered(func() error { return batonledger.ConfirmOwner(t.Context(), c, tc.owner) }, batonledger.ErrSuperseded)
		beginErr := answered(func() error {
			_, err := l.Begin(t.Context(), "restored-"+tc.who, tc.owner)
			return err
		}, batonledger.ErrSuperseded)
		for what, err := range map[string]error{"ConfirmOwner": confirmErr, "Begin": beginErr} {
			if got := errors.Is(err, batonledger.ErrSuperseded); got != tc.superseded || (!got && err != nil) {
				t.Errorf("after the restore, %s of %s (token %d) = %v; want superseded %v", what, tc.who, tc.owner.Token, err, tc.superseded)
			}
		}
	}
}

// errAnswered marks an error that is etcd's answer, not the lack of one (answered).
var errAnswered = errors.New("answered")

// answered retries call while etcd gives no answer (a connection cut by the restart), for up to 20 s:
// nil, or the error of the answer (one wrapping refusal or errAnswered).
func answered(call func() error, refusal error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := call()
		if err == nil || errors.Is(err, refusal) || errors.Is(err, errAnswered) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

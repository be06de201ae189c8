package election_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// A restore can bring a waiting candidate's own key back at an older revision (found by the
// simulator's election world: queues left without a leader after the heal). node-a waits behind
// node-b when the backup is taken; it withdraws and stands again (its key, named after its lease, is
// put again at a newer revision); etcd is restored from the backup with --bump-revision, so node-a's
// key is back at its first revision. When node-b resigns, node-a must win, not wait for its own key
// to go as if it were an older candidate's (it waited for ever before the fix).
func TestRestoredOwnKeyIsNotAPredecessor(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cfg := election.Config{TTL: 10 * time.Second}
	a := newCandidate(t, c, "node-a", cfg)
	b := newCandidate(t, c, "node-b", cfg)
	operator := etcdx.Client(t, c)
	prefix := a.el.ElectionKey(project, "own")

	bTerm, err := b.el.Campaign(t.Context(), project, "own", b.id)
	if err != nil {
		t.Fatal(err)
	}
	first, withdraw := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { _, err := a.el.Campaign(first, project, "own", a.id); done <- err }()
	waitCandidates(t, operator, prefix, 2, 10*time.Second)
	backup, err := c.SaveSnapshot(t.Context(), operator)
	if err != nil {
		t.Fatal(err)
	}
	withdraw()
	<-done
	waitCandidates(t, operator, prefix, 1, 10*time.Second)
	aTerms := make(chan *election.Term, 1)
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		// A campaign that finds its key restored at an older revision fails with ErrKeyLost, and one
		// whose request meets the restore's restart of etcd fails with Unavailable: Run campaigns
		// again after either, and so does this. What must not happen is a campaign that waits.
		for ctx.Err() == nil {
			term, err := a.el.Campaign(ctx, project, "own", a.id)
			if err == nil {
				aTerms <- term
				return
			}
			if ctx.Err() == nil {
				t.Logf("node-a's campaign: %v; campaigning again", err)
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
	waitCandidates(t, operator, prefix, 2, 10*time.Second)
	if err := c.Restore(backup, etcdx.RestoreOptions{BumpRevision: 1000, MarkCompacted: true}); err != nil {
		t.Fatal(err)
	}
	if err := answered(func() error { return bTerm.Resign(t.Context()) }, nil); err != nil {
		t.Logf("node-b's resign: %v", err)
	}
	select {
	case term := <-aTerms:
		t.Logf("node-a won with token %d", term.Token())
	case <-time.After(30 * time.Second):
		t.Fatalf("node-a did not win within 30 s of node-b's resign: it waits for its own restored key")
	}
}

// A restore can bring back a key of a live session for an election the process no longer stands
// for (found by the simulator's balance world: queues nobody could win after the heal). node-a leads
// "stray" when the backup is taken, then resigns it (its session lives on: it still leads "kept");
// etcd is restored, and node-a's old key is back, kept alive by node-a's lease, first in line. node-b
// must still win "stray": node-a deletes a key of its session that no campaign stands behind (before
// the fix node-b waited for as long as node-a lived).
func TestRestoredStrayKeyOfALiveSessionIsDeleted(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	cfg := election.Config{TTL: 2 * time.Second}
	a := newCandidate(t, c, "node-a", cfg)
	b := newCandidate(t, c, "node-b", cfg)
	operator := etcdx.Client(t, c)
	if _, err := a.el.Campaign(t.Context(), project, "kept", a.id); err != nil {
		t.Fatal(err)
	}
	stray, err := a.el.Campaign(t.Context(), project, "stray", a.id)
	if err != nil {
		t.Fatal(err)
	}
	backup, err := c.SaveSnapshot(t.Context(), operator)
	if err != nil {
		t.Fatal(err)
	}
	if err := stray.Resign(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Restore(backup, etcdx.RestoreOptions{BumpRevision: 1000, MarkCompacted: true}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	bErr := answered(func() error { _, err := b.el.Campaign(ctx, project, "stray", b.id); return err }, context.DeadlineExceeded)
	if bErr != nil {
		t.Fatalf("node-b could not win \"stray\" within 30 s of the restore: %v (node-a's restored key stands first in line)", bErr)
	}
}

package election_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
)

// Leaders answers for every queue of a project from one read, and agrees with Leader queue by queue:
// the oldest candidate leads while a follower waits behind it, queues nobody stands for are absent, and
// neither another project whose name extends this one's nor a key Baton did not write is taken in.
func TestLeadersOfAProjectInOneRead(t *testing.T) {
	c := etcdx.Start(t, etcdx.Options{})
	a := newCandidate(t, c, "node-a", election.Config{})
	b := newCandidate(t, c, "node-b", election.Config{})
	for _, q := range []string{"orders", "refunds"} {
		if _, err := a.el.Campaign(t.Context(), project, q, "node-a"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.el.Campaign(t.Context(), project, "emails", "node-b"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.el.Campaign(t.Context(), project+"x", "orders", "node-b"); err != nil {
		t.Fatal(err)
	}
	// node-b also stands for orders, behind node-a.
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { _, _ = b.el.Campaign(ctx, project, "orders", "node-b") })
	t.Cleanup(func() { cancel(); wg.Wait() })
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := a.client.Get(t.Context(), a.el.ElectionKey(project, "orders")+"/", clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-b's candidate key for orders never appeared (%d keys)", resp.Count)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// A key under the project's prefix that is no candidate key.
	if _, err := a.client.Put(t.Context(), a.el.ElectionKey(project, "orders"), "not a candidate"); err != nil {
		t.Fatal(err)
	}

	got, err := a.el.Leaders(t.Context(), project)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 {
		t.Fatalf("Leaders(%s) = %v, want orders, refunds and emails", project, got)
	}
	for _, q := range []string{"orders", "refunds", "emails"} {
		want, err := a.el.Leader(t.Context(), project, q)
		if err != nil {
			t.Fatal(err)
		}
		if got[q] != want {
			t.Errorf("Leaders(%s)[%s] = %+v, Leader says %+v", project, q, got[q], want)
		}
	}
	if got["orders"].ID != "node-a" {
		t.Errorf("orders led by %q, want node-a (the older candidate)", got["orders"].ID)
	}
	none, err := a.el.Leaders(t.Context(), "nobody")
	if err != nil || len(none) != 0 {
		t.Errorf("Leaders of a project without candidates = %v, %v; want an empty map", none, err)
	}
	if _, err := a.el.Leaders(t.Context(), "p/x"); !errors.Is(err, election.ErrInvalidName) {
		t.Errorf("Leaders(\"p/x\") = %v, want ErrInvalidName", err)
	}
}

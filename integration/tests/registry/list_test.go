package registry_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/baton-run/baton/registry"
)

// fleet registers 250 workers in 3 queues; every 5th is drained, every 7th deregistered, and every
// 3rd declares an extra capability. It returns the IDs by "queue/id".
func fleet(t *testing.T, e *env) map[string]registry.Status {
	t.Helper()
	queues := []string{"orders", "payments", "refunds"}
	want := map[string]registry.Status{}
	for i := range 250 {
		q := queues[i%3]
		id := fmt.Sprintf("w-%03d", i)
		r := worker(q, id)
		if i%3 == 0 {
			r.Capabilities = append(r.Capabilities, "Audit")
		}
		e.register(t, r)
		st := registry.StatusOnline
		switch {
		case i%7 == 0:
			if err := e.reg.Deregister(t.Context(), q, id); err != nil {
				t.Fatal(err)
			}
			st = registry.StatusOffline
		case i%5 == 0:
			if err := e.reg.Drain(t.Context(), q, id); err != nil {
				t.Fatal(err)
			}
			st = registry.StatusDraining
		}
		want[q+"/"+id] = st
	}
	return want
}

// listAll pages through f with page size limit; after each page it calls between (if set).
func listAll(t *testing.T, e *env, f registry.Filter, limit int, between func(page int)) []registry.Worker {
	t.Helper()
	var all []registry.Worker
	cursor := ""
	for page := 0; ; page++ {
		ws, next, err := e.reg.List(t.Context(), f, cursor, limit)
		if err != nil {
			t.Fatalf("List(%+v, page %d): %v", f, page, err)
		}
		if len(ws) > limit || (next != "" && len(ws) != limit) {
			t.Fatalf("page %d: %d workers with next %q (limit %d)", page, len(ws), next, limit)
		}
		all = append(all, ws...)
		if next == "" {
			return all
		}
		if between != nil {
			between(page)
		}
		cursor = next
		if page > 1000 {
			t.Fatal("pagination does not end")
		}
	}
}

func keysOf(ws []registry.Worker) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.Queue + "/" + w.ServerID
	}
	return out
}

func TestListPagination(t *testing.T) {
	e := newEnv(t, registry.Config{})
	want := fleet(t, e)

	expect := func(keep func(key string, st registry.Status) bool) []string {
		var out []string
		for k, st := range want {
			if keep(k, st) {
				out = append(out, k)
			}
		}
		slices.Sort(out) // index order: queue, then server ID
		return out
	}
	cases := []struct {
		name   string
		filter registry.Filter
		keep   func(key string, st registry.Status) bool
	}{
		{"all", registry.Filter{}, func(string, registry.Status) bool { return true }},
		{"one queue", registry.Filter{Queue: "payments"}, func(k string, _ registry.Status) bool { return k[:9] == "payments/" }},
		{"draining", registry.Filter{Status: registry.StatusDraining}, func(_ string, st registry.Status) bool { return st == registry.StatusDraining }},
		{"offline in refunds", registry.Filter{Queue: "refunds", Status: registry.StatusOffline},
			func(k string, st registry.Status) bool { return k[:8] == "refunds/" && st == registry.StatusOffline }},
		{"capability", registry.Filter{Capability: "Audit"}, func(k string, _ registry.Status) bool {
			var i int
			_, _ = fmt.Sscanf(k[len(k)-3:], "%d", &i)
			return i%3 == 0
		}},
		{"queue without workers", registry.Filter{Queue: "order"}, func(string, registry.Status) bool { return false }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := listAll(t, e, tc.filter, 7, nil)
			if exp := expect(tc.keep); !slices.Equal(keysOf(got), exp) {
				t.Fatalf("listed %d workers, want %d:\n got %v\nwant %v", len(got), len(exp), keysOf(got), exp)
			}
			for _, w := range got {
				if w.Status != want[w.Queue+"/"+w.ServerID] {
					t.Fatalf("%s/%s listed as %s, want %s", w.Queue, w.ServerID, w.Status, want[w.Queue+"/"+w.ServerID])
				}
			}
		})
	}
	if all := listAll(t, e, registry.Filter{}, registry.MaxListLimit, nil); len(all) != 250 {
		t.Fatalf("one big page: %d workers", len(all))
	}
}

func TestListStableUnderConcurrentInserts(t *testing.T) {
	e := newEnv(t, registry.Config{})
	before := fleet(t, e)
	added := map[string]bool{}
	n := 0
	insert := func(int) {
		// Three new workers per page, spread over the key space: some sort before the cursor, some
		// after it.
		for _, q := range []string{"orders", "payments", "refunds"} {
			id := fmt.Sprintf("new-%03d", n)
			if n%2 == 1 {
				id = fmt.Sprintf("a-new-%03d", n)
			}
			n++
			e.register(t, worker(q, id))
			added[q+"/"+id] = true
		}
	}
	got := listAll(t, e, registry.Filter{}, 7, insert)

	seen := map[string]int{}
	for _, k := range keysOf(got) {
		seen[k]++
		if seen[k] > 1 {
			t.Fatalf("%s listed twice", k)
		}
		if _, ok := before[k]; !ok && !added[k] {
			t.Fatalf("%s listed but never registered", k)
		}
	}
	for k := range before {
		if seen[k] != 1 {
			t.Fatalf("%s existed before paging started but was listed %d times", k, seen[k])
		}
	}
	newSeen := 0
	for k := range added {
		newSeen += seen[k]
	}
	t.Logf("%d workers before paging, %d registered during it, %d of those listed", len(before), len(added), newSeen)
	if !slices.IsSortedFunc(got, func(a, b registry.Worker) int {
		return compareKeys(a.Queue, a.ServerID, b.Queue, b.ServerID)
	}) {
		t.Fatal("pages are not in (queue, server ID) order")
	}
}

func compareKeys(qa, ia, qb, ib string) int {
	if qa != qb {
		if qa < qb {
			return -1
		}
		return 1
	}
	switch {
	case ia < ib:
		return -1
	case ia > ib:
		return 1
	}
	return 0
}

func TestListArguments(t *testing.T) {
	e := newEnv(t, registry.Config{})
	for i := range 3 {
		e.register(t, worker("orders", fmt.Sprintf("w-%d", i)))
		e.register(t, worker("payments", fmt.Sprintf("w-%d", i)))
	}
	ctx := t.Context()
	for _, limit := range []int{0, -1, registry.MaxListLimit + 1} {
		if _, _, err := e.reg.List(ctx, registry.Filter{}, "", limit); !errors.Is(err, registry.ErrInvalidArgument) {
			t.Fatalf("limit %d: %v", limit, err)
		}
	}
	if _, _, err := e.reg.List(ctx, registry.Filter{Status: "ZOMBIE"}, "", 10); !errors.Is(err, registry.ErrInvalidArgument) {
		t.Fatalf("bad status filter: %v", err)
	}
	if _, _, err := e.reg.List(ctx, registry.Filter{}, "not-a-cursor!", 10); !errors.Is(err, registry.ErrInvalidArgument) {
		t.Fatalf("bad cursor: %v", err)
	}
	page, next, err := e.reg.List(ctx, registry.Filter{Queue: "orders"}, "", 2)
	if err != nil || len(page) != 2 || next == "" {
		t.Fatalf("first page: %d %q %v", len(page), next, err)
	}
	if _, _, err := e.reg.List(ctx, registry.Filter{Queue: "payments"}, next, 2); !errors.Is(err, registry.ErrInvalidArgument) {
		t.Fatalf("cursor of another queue: %v", err)
	}
	// A page that ends exactly at the last entry says so.
	page, next, err = e.reg.List(ctx, registry.Filter{Queue: "orders"}, next, 1)
	if err != nil || len(page) != 1 || next != "" {
		t.Fatalf("last page: %d %q %v", len(page), next, err)
	}
}

func TestListPrunesExpiredEntries(t *testing.T) {
	e := newEnv(t, registry.Config{HeartbeatInterval: 100 * time.Millisecond, Retention: 200 * time.Millisecond})
	for i := range 10 {
		e.register(t, worker("orders", fmt.Sprintf("w-%d", i)))
	}
	for i := range 4 {
		if err := e.reg.Deregister(t.Context(), "orders", fmt.Sprintf("w-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 15*time.Second, "deregistered records expire", func() error {
		if n, _ := e.rdb.Exists(t.Context(), e.reg.WorkerKey("orders", "w-3")).Result(); n != 0 {
			return errors.New("w-3 still there")
		}
		return nil
	})
	got := listAll(t, e, registry.Filter{}, 3, nil)
	if len(got) != 6 {
		t.Fatalf("listed %v, want the 6 live workers", keysOf(got))
	}
	if n, _ := e.rdb.ZCard(t.Context(), e.reg.IndexKey()).Result(); n != 6 {
		t.Fatalf("index holds %d entries after List, want 6", n)
	}
}

package reconciler_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/takeover"
)

// On Redis Cluster the reconciler scans every master: three crashed owners' entries of the layout
// before per-project keys (heartbeat.LegacyKey, no hash tag: a project's keys spread over masters),
// one on each of the three masters, are all cleaned (runs terminated, keys deleted), and a live
// owner's entry (the project's own layout) is left alone. SCAN answers for one server only, so a
// scan through the cluster client alone would see one master's keys.
func TestReconcilerCleansEveryMasterOfACluster(t *testing.T) {
	t.Parallel()
	cl := redisx.StartCluster(t, redisx.ClusterOptions{Masters: 3})
	cc := redisx.ClusterClient(t, cl)
	e := &env{etcd: etcdx.Start(t, etcdx.Options{}), rdb: cc, tc: temporalx.Client(t, temporalServer),
		pfx: redisx.Prefix(t) + heartbeat.DefaultPrefix}
	e.ecli = etcdx.Client(t, e.etcd)
	p := project(t)
	queue := func(i int) string { return fmt.Sprintf("q%d", i) }
	spread := redisx.SpreadKeys(t, cc, 3, func(i int) string {
		id, err := takeover.WorkflowID(p, queue(i))
		if err != nil {
			t.Fatal(err)
		}
		return heartbeat.LegacyKey(e.pfx, id)
	})

	a := e.owner(t, "node-a", election.Config{TTL: 2 * time.Second}, heartbeat.Config{Interval: 200 * time.Millisecond})
	var runs []takeover.Run
	var keys []string
	for _, i := range spread {
		run, key := a.abandon(t, p, queue(i))
		// As a worker of the previous release would have left it.
		fields, err := cc.HGetAll(t.Context(), key).Result()
		if err != nil || len(fields) == 0 {
			t.Fatalf("abandoned entry %s: %v, %v", key, fields, err)
		}
		old := heartbeat.LegacyKey(e.pfx, run.WorkflowID)
		if err := cc.HSet(t.Context(), old, fields).Err(); err != nil {
			t.Fatal(err)
		}
		if err := cc.Del(t.Context(), key).Err(); err != nil {
			t.Fatal(err)
		}
		runs, keys = append(runs, run), append(keys, old)
	}
	b := e.owner(t, "node-b", election.Config{TTL: 5 * time.Second}, heartbeat.Config{Interval: 200 * time.Millisecond})
	liveTerm, live, _ := b.lead(t, p, "live")
	liveKey := b.hb.Key(p, live.WorkflowID)

	rn := e.reconciler(t, "rec-1", p, reconciler.Config{Interval: time.Second, StaleAfter: time.Second}, nil, nil)
	eventually(t, 60*time.Second, "every crashed owner's entry deleted", func() error {
		for _, k := range keys {
			if e.exists(t, k) {
				return fmt.Errorf("%s still exists", k)
			}
		}
		return nil
	})
	for i, run := range runs {
		if st := e.status(t, run.WorkflowID, run.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
			t.Errorf("crashed owner's run of %s is %v, want TERMINATED", queue(spread[i]), st)
		}
	}
	// The live owner's entry is left alone for as long as its term holds (a term that load ends
	// leaves an entry that the reconciler rightly cleans).
	liveRunning := e.status(t, live.WorkflowID, live.RunID) == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	liveKept := e.exists(t, liveKey)
	if err := liveTerm.Check(); err == nil && (!liveRunning || !liveKept) {
		t.Errorf("the live owner's run (running %v) or entry (kept %v) was cleaned while its term holds", liveRunning, liveKept)
	} else if err != nil {
		t.Logf("the live owner's term ended under load (%v): its cleanup is not checked", err)
	}
	wantDeleted := len(keys)
	if !liveKept {
		wantDeleted++
	}
	reports := rn.reports()
	deleted := 0
	var first *reconciler.Report
	for i, r := range reports {
		deleted += r.Deleted
		switch {
		case r.Err == nil && first == nil:
			first = &reports[i]
		case r.Err != nil && !errors.Is(r.Err, reconciler.ErrNotLeader): // a term that load ended is no failure
			t.Errorf("cycle failed: %v", r.Err)
		}
	}
	// The first complete cycle saw the four entries, whichever master holds them: all four existed
	// before it.
	if first == nil {
		t.Fatalf("no cycle completed: %+v", reports)
	}
	if first.Scanned != 4 || first.Active+first.Stale != 4 {
		t.Errorf("first complete cycle saw %d keys (%d active, %d stale), want all 4 on the 3 masters", first.Scanned, first.Active, first.Stale)
	}
	if deleted != wantDeleted {
		t.Errorf("%d entries deleted, want %d", deleted, wantDeleted)
	}
	t.Logf("%d cycles; first complete: scanned %d, active %d, stale %d, redis calls %d", len(reports), first.Scanned, first.Active, first.Stale, first.RedisCalls)
}

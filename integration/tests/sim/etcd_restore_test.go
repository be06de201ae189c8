package sim_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/sim/etcdmodel"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// restoreBump is the --bump-revision of the scripts that bump.
const restoreBump = 1000

// restoreBackend takes a snapshot and later restores it (with bump > 0: --bump-revision bump
// --mark-compacted), on the real etcd or on the model.
type restoreBackend struct {
	save    func(context.Context) error
	restore func(bump int64) error
}

// restoreScript writes, snapshots, writes more (a lease granted after the snapshot, a delete, an
// overwrite) while a watch follows, restores, and reads what a client then sees: the keys and their
// revisions, the leases of before and after the snapshot, the revision of the next write, the
// resumed watch's first answer, a watch from an old revision and a read at one.
func restoreScript(ctx context.Context, t *testing.T, cli *clientv3.Client, b restoreBackend, bump int64) []string {
	s := &scriptRun{cli: cli, index: map[int64]int{}, extra: 10 * time.Second}
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }
	fatal := func(err error) []string { return append(lines, errLine(err)) }
	add("grant: %s", s.lease(ctx, etcdOp{kind: "grant"}))
	add("put: %s", s.do(ctx, etcdOp{kind: "put", key: "k/a", val: "1", lease: 0}))
	add("put: %s", s.do(ctx, etcdOp{kind: "put", key: "k/b", val: "1", lease: -1}))
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wc := cli.Watch(wctx, scriptPrefix, clientv3.WithPrefix(), clientv3.WithRev(s.rev+1))
	if err := b.save(ctx); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	snapRev := s.rev
	add("put: %s", s.do(ctx, etcdOp{kind: "put", key: "k/a", val: "2", lease: 0}))
	add("del: %s", s.do(ctx, etcdOp{kind: "del", key: "k/b", lease: -1}))
	add("grant: %s", s.lease(ctx, etcdOp{kind: "grant"}))
	add("put: %s", s.do(ctx, etcdOp{kind: "put", key: "k/c", val: "1", lease: 1}))
	seen := ""
	for resp := range wc {
		seen += s.events(resp.Events)
		if n := len(resp.Events); n > 0 && resp.Events[n-1].Kv.ModRevision >= s.rev {
			break
		}
	}
	add("watched before the restore: %s", seen)
	before := s.rev
	if err := b.restore(bump); err != nil {
		t.Fatalf("restore: %v", err)
	}
	g, err := getRetrying(ctx, cli)
	if err != nil {
		return fatal(err)
	}
	add("after the restore: rev-snapshot=%d %s", g.Header.Revision-snapRev, s.kvs(g.Kvs))
	for i := range 2 {
		r, err := cli.TimeToLive(ctx, s.leaseID(i))
		if err != nil {
			return fatal(err)
		}
		if r.TTL < 0 {
			add("lease %d: gone", i)
			continue
		}
		// Its full TTL again (the lessor refreshes every lease when the restored member leads),
		// not what was left of it at the snapshot: see the model's Restore.
		add("lease %d: granted=%d full=%v", i, r.GrantedTTL, r.TTL >= r.GrantedTTL-2)
	}
	add("keepalive of the lease granted after the snapshot: %s", s.lease(ctx, etcdOp{kind: "keepalive", lease: 1}))
	// A watch opened after the restore from the revision after the last one seen (what a resumed
	// watch asks), created before the next writes: it must wait for that revision.
	fw := cli.Watch(wctx, scriptPrefix, clientv3.WithPrefix(), clientv3.WithRev(before+1), clientv3.WithCreatedNotify())
	if created := <-fw; !created.Created {
		add("watch from the revision after the last seen: not created: %v", created.Err())
	}
	p, err := cli.Put(ctx, "k/d", "1")
	if err != nil {
		return fatal(err)
	}
	add("next write: rev-snapshot=%d reuses a revision seen=%v", p.Header.Revision-snapRev, p.Header.Revision <= before)
	add("resumed watch: %s", resumedWatch(ctx, cli, wc, before))
	add("watch from the revision after the last seen: %s", resumedWatch(ctx, cli, fw, before))
	add("watch from revision 2: %s", s.watch(ctx, etcdOp{kind: "watch", revBack: s.rev - 2, filter: "noput"}))
	if _, err := cli.Get(ctx, "k/a", clientv3.WithRev(snapRev)); err != nil {
		add("read at the snapshot's revision: %s", errLine(err))
	} else {
		add("read at the snapshot's revision: ok")
	}
	return lines
}

// getRetrying reads the script's keys until the restarted server answers.
func getRetrying(ctx context.Context, cli *clientv3.Client) (*clientv3.GetResponse, error) {
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		g, err := cli.Get(cctx, scriptPrefix, clientv3.WithPrefix())
		cancel()
		if err == nil || ctx.Err() != nil {
			return g, err
		}
	}
}

// resumedWatch writes sentinels until the revision passes before (the last revision the watch saw)
// and returns the watch's first answer after the restore: a compaction, or its first event.
func resumedWatch(ctx context.Context, cli *clientv3.Client, wc clientv3.WatchChan, before int64) string {
	for {
		p, err := cli.Put(ctx, "k/zz", "sentinel")
		if err != nil {
			return errLine(err)
		}
		if p.Header.Revision > before+1 {
			break
		}
	}
	select {
	case resp, ok := <-wc:
		switch {
		case !ok:
			return "closed"
		case resp.CompactRevision != 0:
			return fmt.Sprintf("compacted (at the bumped revision: %v)", resp.CompactRevision > before)
		case len(resp.Events) > 0:
			ev := resp.Events[0]
			return fmt.Sprintf("first event %s %s at revision before+%d", ev.Type, ev.Kv.Key, ev.Kv.ModRevision-before)
		}
		return fmt.Sprintf("response without events: %v", resp.Err())
	case <-time.After(10 * time.Second):
		return "nothing"
	}
}

// TestConformanceEtcdRestore runs the restore script against a real embedded etcd restored with
// etcdutl (without a bump, and with --bump-revision --mark-compacted) and against the model's
// Restore, and compares every line: what a restore does to revisions, keys, leases and watches is
// etcd's, not the simulator's guess.
func TestConformanceEtcdRestore(t *testing.T) {
	for _, bump := range []int64{0, restoreBump} {
		t.Run(fmt.Sprintf("bump=%d", bump), func(t *testing.T) {
			ctx := t.Context()
			c := etcdx.Start(t, etcdx.Options{})
			cli := etcdx.Client(t, c)
			var path string
			real := restoreScript(ctx, t, cli, restoreBackend{
				save: func(ctx context.Context) (err error) { path, err = c.SaveSnapshot(ctx, cli); return err },
				restore: func(bump int64) error {
					return c.Restore(path, etcdx.RestoreOptions{BumpRevision: uint64(bump), MarkCompacted: bump > 0})
				},
			}, bump)
			model := etcdmodel.New(etcdmodel.Options{})
			defer model.Close()
			mcli := model.NewClient(ctx, "restore")
			defer mcli.Close()
			var snap etcdmodel.Snapshot
			got := restoreScript(ctx, t, mcli, restoreBackend{
				save: func(context.Context) error { snap = model.Snapshot(); return nil },
				restore: func(bump int64) error {
					return model.Restore(snap, etcdmodel.RestoreOptions{BumpRevision: bump, MarkCompacted: bump > 0})
				},
			}, bump)
			if d := diffLines(real, got); d != "" {
				t.Fatalf("the model differs from etcd at %s\nreal script:\n%s", d, strings.Join(real, "\n"))
			}
			t.Logf("real and model agree:\n%s", strings.Join(real, "\n"))
		})
	}
}

// TestEtcdModelRestoreFlags: the model refuses the flag pairs etcdutl refuses.
func TestEtcdModelRestoreFlags(t *testing.T) {
	m := etcdmodel.New(etcdmodel.Options{})
	defer m.Close()
	snap := m.Snapshot()
	for _, o := range []etcdmodel.RestoreOptions{{BumpRevision: 5}, {MarkCompacted: true}, {BumpRevision: -1}} {
		if err := m.Restore(snap, o); !errors.Is(err, etcdmodel.ErrRestoreFlags) {
			t.Errorf("Restore(%+v) = %v, want ErrRestoreFlags", o, err)
		}
	}
}

package sim

import (
	"fmt"
	"sort"
	"time"

	"github.com/baton-run/baton/integration/sim/etcdmodel"
)

// The etcd restore faults, drawn in the election, ledger and balance worlds: an operator restores
// etcd from a snapshot taken earlier in the schedule (etcdmodel.Model.Restore). Without a bump the
// revision goes back and later writes reuse revision numbers (a resurrected key of an old term, a
// token seen before); with --bump-revision --mark-compacted it jumps and every watch from before is
// compacted. Either way what was written after the snapshot is gone, and the snapshot's keys and
// leases are back.
const (
	FaultRestore     = "restore"      // restored without --bump-revision
	FaultRestoreBump = "restore-bump" // restored with --bump-revision --mark-compacted
	faultSnapshot    = "snapshot"     // the backup a later restore goes back to (not a fault)

	ProbeRestore     = "etcd restored, revision went back"
	ProbeRestoreBump = "etcd restored with --bump-revision"
)

// restoreBump is the --bump-revision of a bumped restore: more than a schedule writes, as an
// operator's bump must exceed the revisions lost.
const restoreBump = 1_000_000

// restoreEvent is one planned restore: the snapshot's time and the restore's, relative to the start.
type restoreEvent struct {
	snapAt, at time.Duration
	bump       bool
}

// drawRestores draws a world's restores from a stream of their own ("<world>/restore"), so that
// the plans of the seeds before restores existed keep their other faults. Half the seeds restore,
// once or twice in the chaos phase, each time to a snapshot 1-20 s older, bumped or not.
func drawRestores(s Streams, world string, chaos time.Duration) []restoreEvent {
	r := s.Rand(world + "/restore")
	if r.IntN(2) == 0 {
		return nil
	}
	var out []restoreEvent
	for range 1 + r.IntN(2) {
		at := time.Duration(r.Int64N(int64(chaos)))
		back := min(at, time.Duration(1000+r.IntN(19000))*time.Millisecond)
		out = append(out, restoreEvent{snapAt: at - back, at: at, bump: r.IntN(2) == 0})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at < out[j].at })
	for i := 1; i < len(out); i++ {
		// A backup from before an earlier restore is not one an operator would bump past: the bump
		// must exceed the revisions lost since the backup, and the earlier restore's jump is not
		// among them.
		out[i].snapAt = max(out[i].snapAt, out[i-1].at)
	}
	return out
}

func (e restoreEvent) String() string {
	kind := FaultRestore
	if e.bump {
		kind = FaultRestoreBump
	}
	return fmt.Sprintf("%s(snapshot@%v)@%v", kind, e.snapAt, e.at)
}

// kind is the fault kind of the restore.
func (e restoreEvent) kind() string {
	if e.bump {
		return FaultRestoreBump
	}
	return FaultRestore
}

// takeSnapshot keeps the i-th planned snapshot.
func (g *stage) takeSnapshot(i int) {
	if g.snaps == nil {
		g.snaps = map[int]etcdmodel.Snapshot{}
	}
	g.snaps[i] = g.model.Snapshot()
	g.rec.Add("world", "snapshot %d at revision %d", i, g.snaps[i].Revision())
}

// restore restores the i-th snapshot (bumped or not) and reports whether it did.
func (g *stage) restore(i int, bump bool) bool {
	snap, ok := g.snaps[i]
	if !ok {
		return false
	}
	o := etcdmodel.RestoreOptions{}
	if bump {
		o.BumpRevision, o.MarkCompacted = restoreBump, true
	}
	from := g.model.Revision()
	if err := g.model.Restore(snap, o); err != nil {
		g.violate("restore: %v", err)
		return false
	}
	g.rec.Add("world", "restored snapshot %d: revision %d -> %d", i, from, g.model.Revision())
	if bump {
		g.probe(ProbeRestoreBump)
	} else {
		g.probe(ProbeRestore)
	}
	return true
}

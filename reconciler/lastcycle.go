package reconciler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
)

// LastCycle is the record a reconciler leader keeps in etcd of its project's last cycle that
// completed, so that someone outside every worker process (`baton verify`, a periodic job) can tell
// that cleanup still runs, even with every worker down. The leader writes it after each completed
// cycle, fenced by its reconciler term (election.Term.Guard): a superseded leader cannot write it.
// It has no lease: it outlives the processes, which is the point.
//
// Each write stamps the leader's wall clock on an etcd revision, about once an Interval. The key's
// history (as far as etcd keeps it) therefore dates etcd revisions to within an Interval: a record
// written at revision R before a cycle record dated T was written before T. `baton verify` dates
// pending ledger records that way, since etcd keeps no time itself.
type LastCycle struct {
	// ServerID and Token identify the reconciler leader (its term's create revision).
	ServerID string `json:"server_id"`
	Token    int64  `json:"token"`
	// At is when the cycle completed, by the leader's clock; Duration how long it took.
	At       time.Time     `json:"at"`
	Duration time.Duration `json:"duration_ns"`
	// Stale, Terminated, Orphans and CleanupErrors are the cycle's Report figures.
	Stale         int `json:"stale"`
	Terminated    int `json:"terminated"`
	Orphans       int `json:"orphans"`
	CleanupErrors int `json:"cleanup_errors"`
	// Revision is the etcd revision that wrote the record (filled in by ReadLastCycle).
	Revision int64 `json:"-"`
}

// LastCycleKey returns the etcd key of project's LastCycle under the reconciler's election prefix
// (the Elector handed to Run; DefaultElectionPrefix by default): <prefix>/<project>/last-cycle. It
// lies in the project's election range, so the etcd role of `baton acl etcd` covers it, and outside
// the range of the election's candidates (<prefix>/<project>/reconciler/), so no candidate sees it.
func LastCycleKey(electionPrefix, project string) string {
	return election.Keys{Prefix: electionPrefix}.Project(project) + "last-cycle"
}

// ReadLastCycle reads the LastCycle at key as of etcd revision rev (0: the latest). found is false
// when there was none; a revision etcd compacted fails with rpctypes.ErrCompacted.
func ReadLastCycle(ctx context.Context, kv clientv3.KV, key string, rev int64) (rec LastCycle, found bool, err error) {
	var opts []clientv3.OpOption
	if rev > 0 {
		opts = append(opts, clientv3.WithRev(rev))
	}
	resp, err := kv.Get(ctx, key, opts...)
	if err != nil {
		return LastCycle{}, false, fmt.Errorf("reconciler: reading %s: %w", key, err)
	}
	if len(resp.Kvs) == 0 {
		return LastCycle{}, false, nil
	}
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return LastCycle{}, false, fmt.Errorf("reconciler: %s at revision %d is not a cycle record: %w", key, resp.Kvs[0].ModRevision, err)
	}
	rec.Revision = resp.Kvs[0].ModRevision
	return rec, true, nil
}

// recordCycle writes rep as the project's LastCycle at key, under term. A failure is returned for
// the caller to log: the cycle itself did its work.
func (r *Reconciler) recordCycle(ctx context.Context, term *election.Term, key string, rep Report) error {
	b, err := json.Marshal(LastCycle{ServerID: rep.ServerID, Token: rep.Token, At: rep.Started.Add(rep.Duration),
		Duration: rep.Duration, Stale: rep.Stale, Terminated: rep.Terminated, Orphans: rep.Orphans, CleanupErrors: rep.CleanupErrors})
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, r.cfg.CallTimeout)
	defer cancel()
	_, err = term.Guard(cctx, clientv3.OpPut(key, string(b)))
	return err
}

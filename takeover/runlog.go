package takeover

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// DefaultRunLogPrefix is the etcd prefix of the run log unless NewEtcdRunLog is given one.
const DefaultRunLogPrefix = "/baton/runs"

// ErrRunLogDenied wraps the run log's errors when etcd refuses them for want of permission: a role
// made before the run log existed (`baton acl etcd` grants it now). Baton then works as it did
// before the log: a takeover starts and ends runs without logging them, and a carry-over finds the
// earlier runs with visibility alone; both say so once, at error level.
var ErrRunLogDenied = errors.New("takeover: etcd refuses the run log (grant the role readwrite on its range; `baton acl etcd` prints it)")

// denied wraps err with ErrRunLogDenied when etcd refused it for want of permission.
func denied(err error) error {
	if errors.Is(err, rpctypes.ErrPermissionDenied) {
		return fmt.Errorf("%w: %w", ErrRunLogDenied, err)
	}
	return err
}

// RunLog records, in a store that reads are linearizable in, every dispatcher run a takeover starts,
// reuses or ends, before the takeover reports the run or ends it. A successor's carry-over reads the
// log to find every run that may have accepted requests, instead of trusting Temporal's visibility
// (eventually consistent, and not ordered across runs: a closed run may be listed as RUNNING, or not
// at all, for as long as its close waits to be indexed). A run Baton does not manage to log is never
// ended by Baton: it stays open (unless an operator or the run itself closes it), so the next
// takeover's describe, or its start (WorkflowIDConflictPolicy FAIL), finds it and names it as its
// prior run; a run closed by someone else before that describe is still the workflow's latest, and
// the describe names it all the same.
//
// A takeover with a RunLog names the range of its queue's records in the run's Owner (Owner.RunLog),
// so the run's carry-over reads exactly the log its takeovers wrote.
type RunLog interface {
	// Range returns the range that every record of project's queue starts with.
	Range(project, queue string) string
	// Record logs run in the range rng. Recording a chain again replaces its record.
	Record(ctx context.Context, rng string, run LoggedRun) error
}

// LoggedRun is one record of the run log: a chain of runs of the queue's workflow ID (one run, or
// several joined by continue-as-new) and its owner as the run's memo said.
type LoggedRun struct {
	// RunID is the chain's first run: the record's key.
	RunID string
	// Last is the chain's latest run when it was logged last (empty: RunID), where a reader starts to
	// follow the chain's continue-as-new links; the takeover that ends a chain logs it again with the
	// run it ends.
	Last     string
	ServerID string
	Token    int64
}

// EtcdRunLog is the RunLog in etcd. Its layout, one key per run:
//
//	<prefix>/<project>/<queue>/<first run ID>  ->  "<server_id> <token> <last run ID>"
//
// Records carry no lease: a record goes once a carry-over has read past its run (Forget), or once
// the run's history is gone. A project's records share <prefix>/<project>/ (RunLogProject), the range
// its workers' etcd role is granted.
type EtcdRunLog struct {
	client *clientv3.Client
	prefix string
}

var _ RunLog = (*EtcdRunLog)(nil)

// NewEtcdRunLog returns the run log under prefix (DefaultRunLogPrefix when empty) in c.
func NewEtcdRunLog(c *clientv3.Client, prefix string) (*EtcdRunLog, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: run log: etcd client must not be nil", ErrInvalidConfig)
	case strings.HasSuffix(prefix, "/"):
		return nil, fmt.Errorf("%w: run log prefix must not end with '/', got %q", ErrInvalidConfig, prefix)
	}
	return &EtcdRunLog{client: c, prefix: cmp.Or(prefix, DefaultRunLogPrefix)}, nil
}

// RunLogProject returns the range of every run-log record of project under prefix
// (DefaultRunLogPrefix when empty): <prefix>/<project>/.
func RunLogProject(prefix, project string) string {
	return cmp.Or(prefix, DefaultRunLogPrefix) + "/" + project + "/"
}

// RunLogRange returns the range of the records of project's queue under prefix (DefaultRunLogPrefix
// when empty): <prefix>/<project>/<queue>/. A record's key is the range followed by the run ID.
func RunLogRange(prefix, project, queue string) string {
	return RunLogProject(prefix, project) + queue + "/"
}

// Project returns the range of every record of project in this log (RunLogProject).
func (l *EtcdRunLog) Project(project string) string { return RunLogProject(l.prefix, project) }

// Range implements RunLog.
func (l *EtcdRunLog) Range(project, queue string) string {
	return RunLogRange(l.prefix, project, queue)
}

// Record implements RunLog.
func (l *EtcdRunLog) Record(ctx context.Context, rng string, run LoggedRun) error {
	if err := checkRange(rng); err != nil {
		return err
	}
	for _, id := range []string{run.RunID, run.Last} {
		if strings.ContainsAny(id, "/ ") {
			return fmt.Errorf("takeover: run log: invalid run ID %q", id)
		}
	}
	if run.RunID == "" {
		return errors.New("takeover: run log: a record needs its chain's first run ID")
	}
	serverID := cmp.Or(strings.ReplaceAll(run.ServerID, " ", "_"), "-")
	value := serverID + " " + strconv.FormatInt(run.Token, 10) + " " + cmp.Or(run.Last, run.RunID)
	if _, err := l.client.Put(ctx, rng+run.RunID, value); err != nil {
		return fmt.Errorf("takeover: log run %s: %w", run.RunID, denied(err))
	}
	return nil
}

// Runs returns the chains logged in rng (a linearizable read). A record whose value does not read
// as "<server_id> <token> <last run ID>" still names its chain's first run, which is what a
// carry-over needs; the rest is left zero.
func (l *EtcdRunLog) Runs(ctx context.Context, rng string) ([]LoggedRun, error) {
	if err := checkRange(rng); err != nil {
		return nil, err
	}
	resp, err := l.client.Get(ctx, rng, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("takeover: read the run log %s: %w", rng, denied(err))
	}
	runs := make([]LoggedRun, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		r := LoggedRun{RunID: strings.TrimPrefix(string(kv.Key), rng)}
		if r.RunID == "" || strings.Contains(r.RunID, "/") {
			continue
		}
		if f := strings.Fields(string(kv.Value)); len(f) == 3 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				r.ServerID, r.Token, r.Last = f[0], n, f[2]
			}
		}
		runs = append(runs, r)
	}
	return runs, nil
}

// Forget deletes the records of runIDs in rng: runs a carry-over has read past for good.
func (l *EtcdRunLog) Forget(ctx context.Context, rng string, runIDs []string) error {
	if err := checkRange(rng); err != nil {
		return err
	}
	if len(runIDs) == 0 {
		return nil
	}
	ops := make([]clientv3.Op, 0, len(runIDs))
	for _, id := range runIDs {
		ops = append(ops, clientv3.OpDelete(rng+id))
	}
	// etcd bounds a transaction's operations (--max-txn-ops, default 128).
	for len(ops) > 0 {
		n := min(len(ops), 100)
		if _, err := l.client.Txn(ctx).Then(ops[:n]...).Commit(); err != nil {
			return fmt.Errorf("takeover: forget %d logged runs in %s: %w", len(runIDs), rng, denied(err))
		}
		ops = ops[n:]
	}
	return nil
}

// checkRange refuses a range that is not one RunLogRange returns (it must end with '/'), so that a
// malformed input never reads or deletes past its queue's records.
func checkRange(rng string) error {
	if !strings.HasSuffix(rng, "/") || strings.Count(rng, "/") < 3 {
		return fmt.Errorf("takeover: run log range %q is not <prefix>/<project>/<queue>/", rng)
	}
	return nil
}

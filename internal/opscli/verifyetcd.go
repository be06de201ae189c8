package opscli

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/reconciler"
)

// The checks verify makes from etcd alone.
const (
	// CheckLedgerTwice: no dispatch key's ledger record was completed twice in the history etcd keeps
	// (the handler ran to the end twice for one request).
	CheckLedgerTwice = "ledger-done-twice"
	// CheckLedgerPending: no ledger record has been pending (begun, never completed) longer than
	// -pending-max: a request accepted and left behind.
	CheckLedgerPending = "ledger-pending"
	// CheckReconciler: the project's reconciler leader completed a cycle within -reconciler-max.
	CheckReconciler = "reconciler"
)

// maxListed bounds the violations of one etcd check that verify lists one by one.
const maxListed = 20

// etcdJudge makes the checks of the ledger and the reconciler against one etcd client.
type etcdJudge struct {
	etcd *clientv3.Client
	o    verifyOptions
	now  time.Time
	// lastCycle is the key of the project's reconciler.LastCycle.
	lastCycle string
	// sinceRev is the etcd revision -since stands for: the ledger checks judge what was written
	// after it. 0: everything etcd keeps.
	sinceRev int64
}

// findings collects an etcd check's violations, listing the first maxListed.
type findings struct {
	check string
	out   []violation
	more  int
}

func (f *findings) add(format string, args ...any) {
	if len(f.out) == maxListed {
		f.more++
		return
	}
	f.out = append(f.out, violation{Check: f.check, Queue: "-", Detail: fmt.Sprintf(format, args...)})
}

func (f *findings) list() []violation {
	if f.more > 0 {
		f.out = append(f.out, violation{Check: f.check, Queue: "-", Detail: fmt.Sprintf("... and %d more", f.more)})
	}
	return f.out
}

// reconciler judges CheckReconciler.
func (j etcdJudge) reconciler(ctx context.Context) ([]violation, error) {
	cctx, cancel := context.WithTimeout(ctx, j.o.timeout)
	defer cancel()
	rec, found, err := reconciler.ReadLastCycle(cctx, j.etcd, j.lastCycle, 0)
	f := findings{check: CheckReconciler}
	switch {
	case err != nil:
		return nil, err
	case !found:
		f.add("no reconciler cycle recorded at %s: no reconciler leader has completed one (are the workers' reconcilers disabled, or older than this check?)", j.lastCycle)
	case j.now.Sub(rec.At) > j.o.reconcilerMax:
		f.add("the last completed cycle ended %s ago (by %s, token %d), more than -reconciler-max %s: cleanup has stopped",
			j.now.Sub(rec.At).Round(time.Second), rec.ServerID, rec.Token, j.o.reconcilerMax)
	}
	return f.list(), nil
}

// doneTwice judges CheckLedgerTwice: it replays the ledger's history (the last -ledger-revisions
// revisions, as far as etcd keeps them) and reports each key completed more than once. It returns
// the revisions judged.
func (j etcdJudge) doneTwice(ctx context.Context) (vs []violation, from, to int64, err error) {
	cctx, cancel := context.WithTimeout(ctx, j.o.timeout)
	resp, err := j.etcd.Get(cctx, ledger.Range(j.o.ledgerPrefix, j.o.Cfg.Project), clientv3.WithPrefix(), clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("reading etcd's revision: %w", err)
	}
	to = resp.Header.Revision
	if j.o.ledgerRevisions > 0 {
		from = to - j.o.ledgerRevisions
	}
	if j.sinceRev > 0 {
		from = max(from, j.sinceRev+1)
	}
	w, err := ledger.NewWatchFrom(ctx, j.etcd, j.o.ledgerPrefix, j.o.Cfg.Project, from)
	if err != nil {
		return nil, 0, 0, err
	}
	wctx, stop := context.WithTimeout(ctx, replayBound(j.o.timeout))
	var run sync.WaitGroup
	run.Go(func() { w.Run(wctx) })
	err = w.WaitFor(wctx, to)
	stop()
	run.Wait()
	if err != nil {
		return nil, 0, 0, fmt.Errorf("replaying the ledger's history: %w", err)
	}
	completions, _ := w.Seen()
	keys := make([]string, 0)
	for k, cs := range completions {
		if len(cs) > 1 {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	f := findings{check: CheckLedgerTwice}
	for _, k := range keys {
		cs := completions[k]
		f.add("dispatch key %s completed %d times: %q at revision %d, %q at revision %d", k, len(cs), cs[0].Record, cs[0].Rev, cs[1].Record, cs[1].Rev)
	}
	return f.list(), w.From(), to, nil
}

// replayBound is how long replaying the ledger's history may take.
func replayBound(callTimeout time.Duration) time.Duration { return max(12*callTimeout, time.Minute) }

// pending judges CheckLedgerPending. etcd keeps no time, so records are dated by the reconciler's
// cycle records (reconciler.LastCycle): a record written before a cycle record dated more than
// -pending-max ago has been pending at least that long. Records older than the history etcd keeps of
// the cycle record can only be dated so far; they are reported as not judged.
func (j etcdJudge) pending(ctx context.Context) (vs []violation, unjudged string, err error) {
	cctx, cancel := context.WithTimeout(ctx, j.o.timeout)
	defer cancel()
	recs, _, _, err := ledger.ReadPending(cctx, j.etcd, j.o.ledgerPrefix, j.o.Cfg.Project)
	if err != nil || len(recs) == 0 {
		return nil, "", err
	}
	// Written within the reconciler's CallTimeout after At: older than At + slack.
	slack := cmp.Or(j.o.Cfg.Reconciler.CallTimeout, reconciler.DefaultConfig().CallTimeout)
	anchor, oldest, err := j.dateBefore(cctx, j.now.Add(-j.o.pendingMax-slack))
	if err != nil {
		return nil, "", err
	}
	keys := make([]string, 0, len(recs))
	for k := range recs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	f := findings{check: CheckLedgerPending}
	undated := 0
	for _, k := range keys {
		r := recs[k]
		switch {
		case r.Revision <= j.sinceRev:
			// begun before -since: not judged
		case anchor.Revision > 0 && r.Revision < anchor.Revision:
			f.add("dispatch key %s pending for %s (token %d) since revision %d, before %s (more than -pending-max %s ago): begun and never completed",
				k, r.ServerID, r.Token, r.Revision, anchor.At.Format(time.RFC3339), j.o.pendingMax)
		case anchor.Revision == 0 && (oldest.Revision == 0 || r.Revision < oldest.Revision):
			undated++
		}
	}
	if undated > 0 {
		since := "no reconciler cycle record dates etcd revisions"
		if oldest.Revision > 0 {
			since = fmt.Sprintf("etcd's history dates revisions back to %d (%s) only", oldest.Revision, oldest.At.Format(time.RFC3339))
		}
		unjudged = fmt.Sprintf("%s: %d pending ledger record(s) could not be dated against -pending-max (%s)", CheckLedgerPending, undated, since)
	}
	return f.list(), unjudged, nil
}

// dateBefore walks the history of the reconciler's cycle record back from the latest and returns
// the newest version dated at or before t (Revision 0: none is, as far as etcd keeps history), and
// the oldest version it read.
func (j etcdJudge) dateBefore(ctx context.Context, t time.Time) (anchor, oldest reconciler.LastCycle, err error) {
	var rev int64 // 0: the latest
	for range 10_000 {
		rec, found, err := reconciler.ReadLastCycle(ctx, j.etcd, j.lastCycle, rev)
		switch {
		case errors.Is(err, rpctypes.ErrCompacted), err == nil && !found:
			return reconciler.LastCycle{}, oldest, nil
		case err != nil:
			return reconciler.LastCycle{}, oldest, err
		case !rec.At.After(t):
			return rec, rec, nil
		}
		oldest, rev = rec, rec.Revision-1
		if rev < 1 {
			break
		}
	}
	return reconciler.LastCycle{}, oldest, nil
}

// revisionAfter dates t to an etcd revision for -since: the revision of the oldest reconciler cycle
// record dated after t, so that what is judged was written after t (what was written between t and
// that record, at most a reconcile interval, is not judged). When no record is dated after t, the
// current revision: nothing written yet is before t. ok is false when no cycle record dates
// revisions at all.
func (j etcdJudge) revisionAfter(ctx context.Context, t time.Time) (rev int64, ok bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, j.o.timeout)
	defer cancel()
	var after reconciler.LastCycle
	var at int64 // 0: the latest
	for range 10_000 {
		rec, found, err := reconciler.ReadLastCycle(cctx, j.etcd, j.lastCycle, at)
		switch {
		case errors.Is(err, rpctypes.ErrCompacted), err == nil && !found:
			return after.Revision, after.Revision > 0, nil
		case err != nil:
			return 0, false, err
		case !rec.At.After(t) && after.Revision > 0:
			return after.Revision, true, nil
		case !rec.At.After(t):
			resp, err := j.etcd.Get(cctx, j.lastCycle, clientv3.WithCountOnly())
			if err != nil {
				return 0, false, err
			}
			return resp.Header.Revision, true, nil
		}
		after, at = rec, rec.Revision-1
		if at < 1 {
			break
		}
	}
	return after.Revision, after.Revision > 0, nil
}

// etcdChecks makes the checks of the ledger (unless -ledger-prefix is empty) and of the reconciler
// (unless the configuration disables it) into v.
func (v *verdict) etcdChecks(ctx context.Context, o verifyOptions, lc *Hooks) {
	if o.ledgerPrefix == "" && o.Cfg.DisableReconciler {
		return
	}
	clientCfg := o.Clients
	if clientCfg.EtcdDialTimeout == 0 || clientCfg.EtcdDialTimeout > o.timeout {
		clientCfg.EtcdDialTimeout = o.timeout
	}
	etcd, err := lc.Etcd(ctx, clientCfg)
	if err != nil {
		v.Unjudged = append(v.Unjudged, fmt.Sprintf("etcd: %v", err))
		return
	}
	j := etcdJudge{etcd: etcd, o: o, now: time.Now(),
		lastCycle: reconciler.LastCycleKey(cmp.Or(o.Cfg.ReconcilerElectionPrefix, reconciler.DefaultElectionPrefix), o.Cfg.Project)}
	if !o.Cfg.DisableReconciler {
		found, err := j.reconciler(ctx)
		v.add(found, CheckReconciler, err)
	}
	if o.ledgerPrefix == "" {
		return
	}
	switch {
	case o.since.rev > 0:
		j.sinceRev = o.since.rev
	case !o.since.at.IsZero():
		rev, ok, err := j.revisionAfter(ctx, o.since.at)
		switch {
		case err != nil:
			v.Unjudged = append(v.Unjudged, fmt.Sprintf("-since %s: dating it to an etcd revision: %v", o.since, err))
			return
		case !ok:
			v.Unjudged = append(v.Unjudged, fmt.Sprintf("-since %s: no reconciler cycle record (%s) dates etcd revisions, so the ledger checks "+
				"cannot tell what was written after it: give -since an etcd revision", o.since, j.lastCycle))
			return
		}
		j.sinceRev = rev
	}
	v.SinceRevision = j.sinceRev
	found, from, to, err := j.doneTwice(ctx)
	v.add(found, CheckLedgerTwice, err)
	v.LedgerFrom, v.LedgerTo = from, to
	found, unjudged, err := j.pending(ctx)
	v.add(found, CheckLedgerPending, err)
	if unjudged != "" {
		v.Unjudged = append(v.Unjudged, unjudged)
	}
}

// add records a check's violations, or that it could not be made.
func (v *verdict) add(found []violation, check string, err error) {
	v.Violations = append(v.Violations, found...)
	if err != nil {
		v.Unjudged = append(v.Unjudged, fmt.Sprintf("%s: %v", check, err))
	}
}

package ledger

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/clock"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// The states of a ledger record (State reads one from a record's text).
const (
	Pending = "pending"
	Done    = "done"
)

// ledgerRounds bounds the read-and-compare rounds of one Begin or Complete. A round is lost only
// when the record changed between the failed compare and the next one (it expired, or an older
// owner's record was taken over); more than a few in a row means something rewrites the record.
const ledgerRounds = 4

// Etcd keeps dispatch keys in etcd under a prefix, each project's in a range of its own (Range), each
// for a retention period (records share a lease, rotated every half retention, so a record lives
// between half and the full period). Every write is guarded by the owner's exact-match lease
// (OwnerCmps); see the package doc for the layout.
type Etcd struct {
	client    *clientv3.Client
	prefix    string
	retention time.Duration
	clock     clock.Clock
	// legacy: Begin also reads the record a release before per-project keys wrote (LegacyKey), so
	// that a request done under the old layout stays a duplicate (Config.IgnoreLegacy).
	legacy bool

	mu      sync.Mutex
	lease   clientv3.LeaseID
	granted time.Time
	// granting is closed when the grant under way ends (nil: none is): one caller at a time grants,
	// without mu, and the others wait on it with their own contexts (currentLease).
	granting chan struct{}
	// failing is the first write failure of the current streak (zero once a write went through), and
	// failure its latest error: what Check reports.
	failing time.Time
	failure error
}

// New returns a ledger on c configured by cfg (zero fields: their defaults). It fails with an error
// wrapping ErrInvalidConfig, naming the field and the rule, when cfg breaks one.
func New(c *clientv3.Client, cfg Config) (*Etcd, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("ledger: the etcd client must not be nil")
	}
	cfg = cfg.withDefaults()
	return &Etcd{client: c, prefix: cfg.Prefix, retention: cfg.Retention, clock: cfg.Clock, legacy: !cfg.IgnoreLegacy}, nil
}

// RunLog reads the takeovers' run log (takeover.RunLog) with the ledger's client: the dispatcher's
// carry-over reads it there unless told otherwise (dispatcher.Activities.RunLog).
func (l *Etcd) RunLog() *takeover.EtcdRunLog {
	// The prefix only shapes Record's keys; a reader is given each range whole.
	rl, err := takeover.NewEtcdRunLog(l.client, "")
	if err != nil {
		return nil // l.client is never nil (New)
	}
	return rl
}

// Key returns the etcd key of project's record of dispatchKey under prefix
// (DefaultPrefix when empty): <prefix>/p/<project>/<dispatch key>, holding
// "<state> <server_id> <token>". This is the ledger's one key layout; Range is the range of
// the project's records.
func Key(prefix, project, dispatchKey string) string {
	return Range(prefix, project) + dispatchKey
}

// Range returns the range every record of project under prefix (DefaultPrefix when
// empty) starts with: <prefix>/p/<project>/. A name never contains '/', so no project's range
// contains another's, and a role granted this range reaches one project's records. The attempts'
// claims (AttemptKey) lie in it too, so that one grant of the range covers the project's
// ledger; readers of records skip them.
func Range(prefix, project string) string {
	return cmp.Or(prefix, DefaultPrefix) + projectDir + project + "/"
}

// projectDir separates the projects' ranges from the layout before them (LegacyKey), whose
// keys after the prefix are hexadecimal dispatch keys and attempt/: 'p' sorts after every one of them.
const projectDir = "/p/"

// AttemptKey returns the etcd key that a running attempt of project's dispatchKey holds while
// its handler runs (Etcd.BeginHolding): <prefix>/p/<project>/attempt/<dispatch key>, holding
// "<server_id> <token>" on the attempt's own lease (AttemptTTL), so that it goes when the
// attempt ends or its process dies. No other attempt begins the key while it exists.
func AttemptKey(prefix, project, dispatchKey string) string {
	return Range(prefix, project) + attemptDir + dispatchKey
}

// LegacyKey returns the key the releases before per-project keys gave dispatchKey's record:
// <prefix>/<dispatch key>, one range for every project. This release reads it (unless Config.IgnoreLegacy)
// and never writes it; the next release stops reading it.
func LegacyKey(prefix, dispatchKey string) string {
	return cmp.Or(prefix, DefaultPrefix) + "/" + dispatchKey
}

// LegacyRange returns the range [key, end) of every record of the layout before per-project
// keys: the dispatch keys are lowercase hexadecimal (IsDispatchKey), so [<prefix>/0, <prefix>/g). No
// project's range (Range) lies in it, so a read grant of it reveals no project's records.
func LegacyRange(prefix string) (key, end string) {
	p := cmp.Or(prefix, DefaultPrefix) + "/"
	return p + "0", p + "g"
}

// attemptDir is the directory of the attempts' claims within a project's range. A dispatch key is
// hexadecimal, so no record's key has a '/' after the range (isRecordKey).
const attemptDir = "attempt/"

// isRecordKey reports whether k, a key with the ledger's range cut off, names a record rather than an
// attempt's claim.
func isRecordKey(k string) bool { return !strings.Contains(k, "/") }

// dropLease forgets lease when it is still the current one, so the next write grants a new lease.
func (l *Etcd) dropLease(lease clientv3.LeaseID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lease == lease {
		l.lease = 0
	}
}

// FailingAfter is how long the ledger's writes may fail before Check reports it: one failed
// attempt is retried by its activity, a streak this long means no dispatch can complete.
const FailingAfter = 5 * time.Second

// noteWrite records the outcome of a write for Check. Refusals that concern one owner or one record
// (ErrSuperseded, ErrBadRecord) say nothing about the ledger and are not counted.
func (l *Etcd) noteWrite(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case err == nil:
		l.failing, l.failure = time.Time{}, nil
	case errors.Is(err, ErrSuperseded) || errors.Is(err, ErrBadRecord) || errors.Is(err, ErrAttemptInFlight) ||
		errors.Is(err, context.Canceled):
	default:
		if l.failing.IsZero() {
			l.failing = l.clock.Now()
		}
		l.failure = err
	}
}

// Check is the ledger's readiness: it fails, wrapping ErrUnavailable, while its writes have
// been failing for FailingAfter (etcd unreachable from this process, a role without write
// permission on the prefix): no dispatch can complete on this worker meanwhile. A write that goes
// through clears it. Add it to the process's readiness (baton.Node.AddReadinessCheck).
func (l *Etcd) Check() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failure == nil || l.clock.Now().Sub(l.failing) < FailingAfter {
		return nil
	}
	return fmt.Errorf("%w: writes under %s failing for %v: %w", ErrUnavailable, l.prefix,
		l.clock.Now().Sub(l.failing).Round(time.Millisecond), l.failure)
}

// currentLease returns the records' lease, granting a new one when there is none or it is half a
// retention old. One caller at a time grants, under its own context and without holding mu across
// the request, so that a slow or hung grant holds up no other caller past its own deadline: the
// others wait for it as long as their contexts allow, then use its lease, or, when it failed or its
// caller gave up, try a grant themselves.
func (l *Etcd) currentLease(ctx context.Context) (clientv3.LeaseID, error) {
	for {
		l.mu.Lock()
		if l.lease != 0 && l.clock.Now().Sub(l.granted) < l.retention/2 {
			lease := l.lease
			l.mu.Unlock()
			return lease, nil
		}
		wait := l.granting
		if wait == nil {
			l.granting = make(chan struct{})
			l.mu.Unlock()
			return l.grant(ctx)
		}
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// grant requests a new lease for the records as the one caller granting (l.granting), then ends
// that grant, whatever its outcome, so that the callers waiting for it go on.
func (l *Etcd) grant(ctx context.Context) (lease clientv3.LeaseID, err error) {
	var resp *clientv3.LeaseGrantResponse
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if err == nil {
			l.lease, l.granted = resp.ID, l.clock.Now()
		}
		close(l.granting)
		l.granting = nil
	}()
	resp, err = l.client.Grant(ctx, int64(l.retention/time.Second))
	if err != nil {
		return 0, err
	}
	return resp.ID, nil
}

// Begin records key as pending for owner, in one transaction that holds only while owner's term
// does. It reports done when the key was completed before (by any owner). A pending record of an
// older token (its run ended mid-dispatch) is taken over; one of owner's own token (a retried
// attempt) is kept; one of a newer token is refused with ErrSuperseded, as is every write once
// owner's term has ended. While another attempt holds the key (BeginHolding), Begin is refused with
// ErrAttemptInFlight, which a retry outlasts.
func (l *Etcd) Begin(ctx context.Context, key string, owner takeover.Owner) (bool, error) {
	return l.begin(ctx, key, owner, 0)
}

// begin is Begin; with an attempt lease, the same transaction that records the key pending also
// writes the attempt's claim (AttemptKey) on that lease. With legacy reads, the transaction
// also compares the old layout's record (LegacyKey): absent, or unchanged since it was read
// and found not to decide the key.
func (l *Etcd) begin(ctx context.Context, key string, owner takeover.Owner, attempt clientv3.LeaseID) (bool, error) {
	if err := ValidateOwner(owner); err != nil {
		return false, err
	}
	k := Key(l.prefix, owner.Project, key)
	claim := &attemptClaim{key: AttemptKey(l.prefix, owner.Project, key), value: fmt.Sprintf("%s %d", owner.ServerID, owner.Token), lease: attempt}
	var legacy *legacyRecord
	if l.legacy && IsDispatchKey(key) { // the old layout's records are of dispatch keys (LegacyRange)
		lk := LegacyKey(l.prefix, key)
		legacy = &legacyRecord{key: lk, cmp: clientv3.Compare(clientv3.CreateRevision(lk), "=", 0)}
	}
	expect := clientv3.Compare(clientv3.ModRevision(k), "=", 0) // the common case: a new key
	for range ledgerRounds {
		ok, rec, err := l.guardedPut(ctx, k, expect, Pending, owner, claim, legacy)
		if err != nil || ok {
			return false, err
		}
		if legacy != nil {
			if done, err := legacy.decide(key, owner); done || err != nil {
				return done, err
			}
		}
		switch {
		case rec.exists && rec.state == Done:
			return true, nil
		case claim.heldBy != "":
			return false, fmt.Errorf("%w: dispatch key %s is being handled by %s; it is begun again once that attempt ends or its process is gone (within %v)",
				ErrAttemptInFlight, key, claim.heldBy, AttemptTTL)
		case !rec.exists:
			expect = clientv3.Compare(clientv3.ModRevision(k), "=", 0) // it expired in between
		case rec.token == owner.Token && attempt == 0:
			return false, nil
		case rec.token > owner.Token:
			return false, fmt.Errorf("%w: dispatch key %s is pending for %s at token %d, newer than %d",
				ErrSuperseded, key, rec.serverID, rec.token, owner.Token)
		default:
			// An older token's record is taken over; one of owner's own (a retried attempt) is written
			// again, with this attempt's claim.
			expect = clientv3.Compare(clientv3.ModRevision(k), "=", rec.modRevision)
		}
	}
	return false, fmt.Errorf("ledger: record %s changed under %d attempts to begin it", k, ledgerRounds)
}

// legacyRecord is the record of a key in the layout before per-project keys, as a Begin compares
// and reads it: such a record counts while its project has none of its own.
type legacyRecord struct {
	key string
	cmp clientv3.Cmp // what the next transaction expects of it
	rec record       // set by a refused write: the record as it is
}

// decide judges the old layout's record for owner: done is a duplicate; pending at a newer token is
// a newer owner's (ErrSuperseded); pending at an older token is taken over, in the new layout only,
// so the next transaction expects it unchanged (an older owner can no longer write it); none (it
// expired) is expected to stay absent.
func (lr *legacyRecord) decide(key string, owner takeover.Owner) (done bool, err error) {
	switch {
	case !lr.rec.exists:
		lr.cmp = clientv3.Compare(clientv3.CreateRevision(lr.key), "=", 0)
		return false, nil
	case lr.rec.state == Done:
		return true, nil
	case lr.rec.token > owner.Token:
		return false, fmt.Errorf("%w: dispatch key %s is pending for %s at token %d (%s), newer than %d",
			ErrSuperseded, key, lr.rec.serverID, lr.rec.token, lr.key, owner.Token)
	}
	lr.cmp = clientv3.Compare(clientv3.ModRevision(lr.key), "=", lr.rec.modRevision)
	return false, nil
}

// attemptClaim is what a Begin writes or checks besides the record: the attempts' claim on the key.
type attemptClaim struct {
	key, value string
	lease      clientv3.LeaseID // 0: check that no claim exists, write none
	heldBy     string           // set by a refused write: the claim that stood in the way
}

// Complete marks key as dispatched by owner, in one transaction that holds only while owner's term
// does and the record is still owner's (exact match). A record already done stays as it is. A
// record that expired while the handler ran is written again as done, so a resend stays a
// duplicate. A newer token's record, or an ended term, gets ErrSuperseded and leaves the record
// pending for the successor, which dispatches again (at-least-once between Begin and Complete).
func (l *Etcd) Complete(ctx context.Context, key string, owner takeover.Owner) error {
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	k := Key(l.prefix, owner.Project, key)
	expect := clientv3.Compare(clientv3.Value(k), "=", encodeRecord(Pending, owner))
	for range ledgerRounds {
		ok, rec, err := l.guardedPut(ctx, k, expect, Done, owner, nil, nil)
		if err != nil || ok {
			return err
		}
		switch {
		case !rec.exists:
			expect = clientv3.Compare(clientv3.ModRevision(k), "=", 0)
		case rec.state == Done:
			return nil
		case rec.token > owner.Token:
			return fmt.Errorf("%w: dispatch key %s is pending for %s at token %d, newer than %d",
				ErrSuperseded, key, rec.serverID, rec.token, owner.Token)
		default:
			expect = clientv3.Compare(clientv3.ModRevision(k), "=", rec.modRevision)
		}
	}
	return fmt.Errorf("ledger: record %s changed under %d attempts to complete it", k, ledgerRounds)
}

// guardedPut writes state for owner at k if owner's term holds and expect holds, and, with a claim,
// no attempt holds the key (the claim is written too when it has a lease). Otherwise it writes
// nothing and returns the record as it is (and sets claim.heldBy to the claim in the way, and
// legacy.rec to the old layout's record), or ErrSuperseded when the term is the reason.
//
// A lease that etcd no longer knows (a restore from an older snapshot, a move to a new cluster, a
// revoke) is replaced at once by a new one, and the write is sent again: retrying with the lost lease
// would fail until the ledger rotated it, half a retention later.
func (l *Etcd) guardedPut(ctx context.Context, k string, expect clientv3.Cmp, state string, owner takeover.Owner,
	claim *attemptClaim, legacy *legacyRecord) (ok bool, rec record, err error) {
	defer func() { l.noteWrite(err) }()
	var resp *clientv3.TxnResponse
	for regranted := false; ; regranted = true {
		var lease clientv3.LeaseID
		if lease, err = l.currentLease(ctx); err != nil {
			return false, record{}, fmt.Errorf("ledger: lease: %w", err)
		}
		cmps := append(OwnerCmps(owner), expect)
		then := []clientv3.Op{clientv3.OpPut(k, encodeRecord(state, owner), clientv3.WithLease(lease))}
		orElse := []clientv3.Op{clientv3.OpGet(owner.ElectionKey), clientv3.OpGet(k)}
		if claim != nil {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(claim.key), "=", 0))
			if claim.lease != 0 {
				then = append(then, clientv3.OpPut(claim.key, claim.value, clientv3.WithLease(claim.lease)))
			}
			orElse = append(orElse, clientv3.OpGet(claim.key))
		}
		if legacy != nil {
			cmps = append(cmps, legacy.cmp)
			orElse = append(orElse, clientv3.OpGet(legacy.key))
		}
		orElse = append(orElse, election.OldestOp(owner.ElectionKey)) // last: why OwnerCmps failed
		resp, err = l.client.Txn(ctx).If(cmps...).Then(then...).Else(orElse...).Commit()
		if err != nil && !regranted && errors.Is(rpctypes.Error(err), rpctypes.ErrLeaseNotFound) {
			l.dropLease(lease)
			continue
		}
		if err != nil {
			return false, record{}, fmt.Errorf("ledger: %s: %w", k, err)
		}
		break
	}
	if resp.Succeeded {
		return true, record{}, nil
	}
	if !election.HeldIn(resp.Responses[0].GetResponseRange().GetKvs(), owner.Token) {
		return false, record{}, fmt.Errorf("%w: election key %s is no longer at revision %d", ErrSuperseded, owner.ElectionKey, owner.Token)
	}
	if !election.LeadsIn(resp.Responses[len(resp.Responses)-1].GetResponseRange().GetKvs(), owner.Token) {
		return false, record{}, fmt.Errorf("%w: a candidate of the election older than token %d exists (etcd restored from a backup?)", ErrSuperseded, owner.Token)
	}
	next := 2
	if claim != nil {
		if kvs := resp.Responses[next].GetResponseRange().GetKvs(); len(kvs) > 0 {
			claim.heldBy = string(kvs[0].Value)
		}
		next++
	}
	if legacy != nil {
		if legacy.rec, err = decodeRecord(legacy.key, resp.Responses[next].GetResponseRange().GetKvs()); err != nil {
			return false, record{}, err
		}
	}
	rec, err = decodeRecord(k, resp.Responses[1].GetResponseRange().GetKvs())
	return false, rec, err
}

// record is a ledger record: "<state> <server_id> <token>", e.g. "done node-a 1234".
type record struct {
	exists      bool
	state       string
	serverID    string
	token       int64
	modRevision int64
}

func encodeRecord(state string, owner takeover.Owner) string {
	return fmt.Sprintf("%s %s %d", state, owner.ServerID, owner.Token)
}

// decodeRecord reads the record of k from a range response. The server ID is everything between
// the first and the last space, so it may contain spaces itself.
func decodeRecord(k string, kvs []*mvccpb.KeyValue) (record, error) {
	if len(kvs) == 0 {
		return record{}, nil
	}
	v := string(kvs[0].Value)
	first, last := strings.IndexByte(v, ' '), strings.LastIndexByte(v, ' ')
	if first < 0 || first == last {
		return record{}, fmt.Errorf("%w: %s = %q, want \"<state> <server_id> <token>\"", ErrBadRecord, k, v)
	}
	rec := record{exists: true, state: v[:first], serverID: v[first+1 : last], modRevision: kvs[0].ModRevision}
	if rec.state != Pending && rec.state != Done {
		return record{}, fmt.Errorf("%w: %s = %q, state must be %s or %s", ErrBadRecord, k, v, Pending, Done)
	}
	tok, err := strconv.ParseInt(v[last+1:], 10, 64)
	if err != nil {
		return record{}, fmt.Errorf("%w: %s = %q, token must be an integer", ErrBadRecord, k, v)
	}
	rec.token = tok
	return rec, nil
}

// Read reads every record of project under prefix (DefaultPrefix when empty) at one
// revision, a page at a time, and returns them by dispatch key, each as stored ("<state> <server_id>
// <token>"; State gives its state), with that revision. Records of the layout before
// per-project keys (LegacyRange) that the project has none of its own for are included: they
// name no project, so every project's reading shows them until the next release. It is for tools
// that judge the ledger from etcd's records rather than a worker's word: `demo-worker load`, drills.
func Read(ctx context.Context, c *clientv3.Client, prefix, project string) (map[string]string, int64, error) {
	out := map[string]string{}
	rev, err := scanLedger(ctx, c, prefix, project, func(key string, kv *mvccpb.KeyValue) { out[key] = string(kv.Value) })
	if err != nil {
		return nil, 0, err
	}
	return out, rev, nil
}

// ReadPending reads every pending record of project under prefix (DefaultPrefix when
// empty), the old layout's as Read does, at one revision, a page at a time: by dispatch key,
// with the revision that wrote each. Records that are not ledger records are counted in malformed,
// not returned. It is how a check finds requests begun and never finished (`baton verify` dates
// them by revision).
func ReadPending(ctx context.Context, c *clientv3.Client, prefix, project string) (pending map[string]Record, malformed int, rev int64, err error) {
	pending = map[string]Record{}
	rev, err = scanLedger(ctx, c, prefix, project, func(key string, kv *mvccpb.KeyValue) {
		r, err := decodeRecord(string(kv.Key), []*mvccpb.KeyValue{kv})
		switch {
		case err != nil:
			malformed++
		case r.state == Pending:
			pending[key] = Record{State: r.state, ServerID: r.serverID, Token: r.token, Revision: r.modRevision}
		}
	})
	if err != nil {
		return nil, 0, 0, err
	}
	return pending, malformed, rev, nil
}

// scanLedger calls fn with every record of project, by dispatch key, then with the old layout's
// records of the keys the project has none for, all read at one revision, and returns it.
func scanLedger(ctx context.Context, c *clientv3.Client, prefix, project string, fn func(key string, kv *mvccpb.KeyValue)) (int64, error) {
	own := Range(prefix, project)
	seen := map[string]bool{}
	rev, err := scanRange(ctx, c, own, clientv3.GetPrefixRangeEnd(own), own, 0, func(k string, kv *mvccpb.KeyValue) {
		seen[k] = true
		fn(k, kv)
	})
	if err != nil {
		return 0, err
	}
	start, end := LegacyRange(prefix)
	_, err = scanRange(ctx, c, start, end, LegacyKey(prefix, ""), rev, func(k string, kv *mvccpb.KeyValue) {
		if !seen[k] {
			fn(k, kv)
		}
	})
	return rev, err
}

// scanRange calls fn with every record in [start, end), by its key with cut cut off, read at rev (0:
// the current revision) a page at a time, and returns the revision read.
func scanRange(ctx context.Context, c *clientv3.Client, start, end, cut string, rev int64, fn func(key string, kv *mvccpb.KeyValue)) (int64, error) {
	for {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(1000)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		resp, err := c.Get(ctx, start, opts...)
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if k := strings.TrimPrefix(string(kv.Key), cut); isRecordKey(k) {
				fn(k, kv)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// State returns the state of a record as Read returns it: Pending or Done
// for a well-formed one.
func State(record string) string {
	state, _, _ := strings.Cut(record, " ")
	return state
}

// Record is one dispatch request's record, as an operator reads it back.
type Record struct {
	// State is Pending (begun, its handler not known to have finished) or Done.
	State string `json:"state"`
	// ServerID and Token are the owner that wrote the record: its server and term.
	ServerID string `json:"server_id"`
	Token    int64  `json:"token"`
	// Revision is the etcd revision that last wrote it.
	Revision int64 `json:"revision"`
}

// ReadRecord reads project's record of dispatchKey under prefix (DefaultPrefix when
// empty), or, when the project has none, the record of the layout before per-project keys
// (LegacyKey), both at one revision; found is false when neither exists: the request was never
// begun (not yet dispatched, or never accepted). A record that is not one fails with ErrBadRecord.
func ReadRecord(ctx context.Context, c *clientv3.Client, prefix, project, dispatchKey string) (rec Record, found bool, err error) {
	k, lk := Key(prefix, project, dispatchKey), LegacyKey(prefix, dispatchKey)
	resp, err := c.Txn(ctx).Then(clientv3.OpGet(k), clientv3.OpGet(lk)).Commit()
	if err != nil {
		return Record{}, false, err
	}
	r, err := decodeRecord(k, resp.Responses[0].GetResponseRange().GetKvs())
	if err == nil && !r.exists {
		r, err = decodeRecord(lk, resp.Responses[1].GetResponseRange().GetKvs())
	}
	if err != nil || !r.exists {
		return Record{}, false, err
	}
	return Record{State: r.state, ServerID: r.serverID, Token: r.token, Revision: r.modRevision}, true, nil
}

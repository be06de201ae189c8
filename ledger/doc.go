// Package ledger is the etcd dispatch ledger: one record per dispatch key of each project, written
// only by the key's current owner, so that a dispatch request takes effect once across takeovers.
// It also holds the checks an application uses to fence its own side effects the same way
// (OwnerCmps, ConfirmOwner), the readers that tools use to judge the ledger from etcd's records
// rather than a worker's word (Read, ReadPending, ReadRecord), and the replay of its history
// (Watch). The dispatcher's workflow and activities (package dispatcher) use it through their
// dispatcher.Ledger interface; Etcd is the implementation Baton ships.
//
// # Fencing: the Owner contract
//
// A takeover starts every dispatcher run with a takeover.Owner as its input and memo. Token and
// ElectionKey are the run's exact-match lease: the owner's election term holds exactly while
// ElectionKey exists in etcd with create revision Token (election.Term.Guard compares the same).
// Once a successor wins, the key is gone or was created again at a higher revision, and the compare
// fails for ever. So:
//
//   - a write to etcd is fenced by putting OwnerCmps(owner) in its transaction's If: etcd itself
//     refuses it once the owner is superseded, however late the request arrives;
//   - a side effect outside etcd is preceded by ConfirmOwner, a linearizable check; it narrows the
//     window to the time between the check and the effect, so such effects must also be idempotent;
//   - an Owner without ElectionKey or a positive Token cannot be checked, and fails closed
//     (ErrInvalidOwner, naming the field; ValidateOwner): no silent fallback to acting unfenced;
//   - a refusal is ErrSuperseded (match it with errors.Is). Retrying cannot fix it: the successor's
//     run does the work.
//
// # What the ledger guarantees
//
// Every write is one transaction comparing OwnerCmps(owner) and the record's exact previous state (its
// value or mod revision), so a superseded owner writes nothing. Begin records a key pending: it takes
// over a pending record of an older token (its run ended mid-dispatch), keeps one of its own token (a
// retried attempt), refuses one of a newer token (ErrSuperseded), and reports done records as
// duplicates. Complete records it done; a record that expired while the handler ran is written
// again as done, so a resend stays a duplicate. A record that does not read as below is
// ErrBadRecord: the ledger does not guess whether such a key was dispatched. So a handler runs at
// least once between Begin and Complete, and a completed key is never handled again.
//
// BeginHolding also claims the key for the attempt that began it, until its handler has returned: no
// other attempt begins the key meanwhile (ErrAttemptInFlight; BeginHolding waits for the claim to
// go), so a handler never runs concurrently with itself. A claim lives on a lease of its own
// (AttemptTTL, 5 s, shorter than the election's default TTL), kept alive while its handler runs
// and revoked when it returns, so a crashed attempt's claim lapses before its successor can win.
//
// Check is the ledger's readiness: it fails (ErrUnavailable) once its writes have failed for
// FailingAfter; a write that goes through clears it.
//
// # Retention
//
// Records carry an etcd lease and live for Config.Retention (default DefaultRetention, 24h; at least
// MinRetention): records share a lease, rotated every half retention, so a record lives between half
// and the full period. A lease etcd no longer knows (a restore, a revoke) is replaced at once. One
// write at a time grants a lease; the others wait for it within their own deadlines, so a slow grant
// holds up no write past its caller's context. A request sent again after its record expired is handled again: the retention bounds how long a
// producer may retry.
//
// # The key layout
//
// Each project (the Owner's Project) has a range of its own under the prefix (Config.Prefix,
// default DefaultPrefix; Range). A name never contains '/', so no project's range covers another's,
// and a role granted it reaches one project's records:
//
//	<prefix>/p/<project>/<dispatch key>          ->  "<state> <server_id> <token>"   e.g. "done node-a 1234"
//	<prefix>/p/<project>/attempt/<dispatch key>  ->  "<server_id> <token>"   while an attempt's handler runs
//
// state is Pending (Begin) or Done (Complete); server_id and token are the owner that wrote it.
// Key, AttemptKey and Range are the one definition of the layout; tools use them. A dispatch key is
// DispatchKeyLen lowercase hexadecimal digits (IsDispatchKey; dispatcher.Request.Key makes them).
//
// # The legacy layout
//
// The releases before kept every project's records in one range, <prefix>/<dispatch key>
// (LegacyKey). This release still reads it and never writes it: Begin compares and reads the old
// record in the same transaction, so a key done there is a duplicate, one an older owner left pending
// is taken over in the project's range, and one a newer owner left pending is ErrSuperseded;
// ReadRecord, Read and ReadPending show an old record where the project has none. That takes read
// access to LegacyRange, which holds no project's new records. Turn the reading off with
// Config.IgnoreLegacy once the previous release's records have expired (its workers stopped a
// retention ago); the next release removes it.
//
// # Replaying the ledger
//
// The ledger writes a done record only in a fenced transaction and never rewrites one, so each put of
// a done record in etcd's history is one completion of that dispatch. Watch follows a project's range
// from a revision on (NewWatchFrom replays what etcd keeps): a key with two completions was handled to
// the end twice. Load runs, drills, benchmarks and `baton verify` judge the ledger through it.
package ledger

// Package dispatcher is Baton's reference dispatcher workflow, its Dispatch activity and the etcd
// ledger that makes each dispatch request take effect once across takeovers, together with the
// checks an application uses to fence its own side effects the same way.
//
// # The Owner contract
//
// A takeover starts every dispatcher run with a takeover.Owner as its input and memo. Token and
// ElectionKey are the run's exact-match lease: the owner's election term holds exactly while
// ElectionKey exists in etcd with create revision Token (election.Term.Guard compares the same).
// Once a successor wins, the key is gone or was created again at a higher revision, and the compare
// fails for ever. So:
//
//   - a write to etcd is fenced by putting OwnerCmp(owner) in its transaction's If: etcd itself
//     refuses it once the owner is superseded, however late the request arrives;
//   - a side effect outside etcd is preceded by ConfirmOwner, a linearizable check; it narrows the
//     window to the time between the check and the effect, so such effects must also be idempotent;
//   - an Owner without ElectionKey or a positive Token cannot be checked, and fails closed
//     (ErrInvalidOwner, naming the field): no silent fallback to acting unfenced;
//   - a refusal is ErrSuperseded (match it with errors.Is). Retrying cannot fix it: the successor's
//     run does the work.
//
// Continue-as-new keeps the Owner: every run of a chain belongs to the owner that started the first.
//
// # Dispatch
//
// A Request's identity fields decide its dispatch key (Request.Key, a SHA-256 over the fields joined
// with NUL), so the same request sent twice, or sent again to the next owner's run, has the same key.
// The workflow handles each dispatch signal with the Dispatch activity, which asks the Ledger to
// Begin the key for the run's owner, calls the application's Handler, and Completes the key. A key
// already completed is a duplicate and is not handled again. The handler is at-least-once between
// Begin and Complete: a run terminated or superseded in between leaves the key pending, and the next
// owner handles it again, so handlers must be idempotent by key. The activity fails without retrying,
// with the ApplicationError types ErrTypeSuperseded, ErrTypeInvalidOwner, ErrTypeInvalidRequest and
// ErrTypeBadRecord, when retrying cannot help.
//
// A run cancelled (for example by an operator) ends as Canceled at once. The dispatch in flight at
// that moment may still finish on its worker: the ledger then records it done, or leaves it pending
// for the next owner. Requests the run had accepted but not handled are listed in its State
// (Unhandled, readable with QueryState after the close) and logged; nothing carries them to the next
// run by itself.
//
// RegisterWithOptions tunes, per worker, when runs continue as new (HistoryLimit) and how many keys
// they remember without asking the ledger (RecentKeys); a run's Input overrides both.
//
// # The etcd ledger
//
// EtcdLedger keeps one record per dispatch key, under a prefix (default DefaultLedgerPrefix):
//
//	<prefix>/<dispatch key>  ->  "<state> <server_id> <token>"   e.g. "done node-a 1234"
//
// state is "pending" (Begin) or "done" (Complete); server_id and token are the owner that wrote it.
// Records carry an etcd lease and live for the ledger's retention. Every write is one transaction
// comparing OwnerCmp(owner) and the record's exact previous state (its value or mod revision), so a
// superseded owner writes nothing. Begin takes over a pending record of an older token (its run ended
// mid-dispatch), keeps one of its own token (a retried attempt), refuses one of a newer token
// (ErrSuperseded), and reports done records as duplicates. A record that does not read as above is
// ErrBadRecord: the ledger does not guess whether such a key was dispatched.
package dispatcher

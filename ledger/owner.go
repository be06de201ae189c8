package ledger

import (
	"context"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/takeover"
)

// ValidateOwner returns an error wrapping ErrInvalidOwner, naming the field, when owner cannot be
// fenced: without its election key or its token there is nothing to compare, and an owner nobody can
// check must not act (fail closed).
func ValidateOwner(owner takeover.Owner) error {
	switch {
	case owner.ElectionKey == "":
		return fmt.Errorf("%w: election_key must not be empty (the run was started without the term's key)", ErrInvalidOwner)
	case owner.Token <= 0:
		return fmt.Errorf("%w: token must be positive (the create revision of election_key), got %d", ErrInvalidOwner, owner.Token)
	}
	return nil
}

// OwnerCmp is the comparison that holds exactly while owner's term holds: its election key exists
// with create revision Token. Put it in the If of every etcd transaction whose writes must be refused
// once the owner is superseded:
//
//	resp, err := kv.Txn(ctx).If(ledger.OwnerCmp(owner)).Then(clientv3.OpPut(k, v)).Commit()
//	if err == nil && !resp.Succeeded {
//		err = ledger.ErrSuperseded // nothing was written
//	}
//
// For an owner ValidateOwner rejects, the comparison never holds (no key has a negative create
// revision), or etcd rejects the transaction for its empty key: either way nothing is written.
//
// OwnerCmp alone does not see an etcd restored from a backup that brought a predecessor's key back:
// use OwnerCmps, which also compares that no older candidate exists.
func OwnerCmp(owner takeover.Owner) clientv3.Cmp {
	if ValidateOwner(owner) != nil {
		return clientv3.Compare(clientv3.CreateRevision(owner.ElectionKey), "<", 0)
	}
	return election.HeldCmp(owner.ElectionKey, owner.Token)
}

// ConfirmOwner asks etcd, with a guarded transaction that writes nothing (a linearizable read),
// whether owner's term still holds. It returns an error wrapping ErrSuperseded when it does not, one
// wrapping ErrInvalidOwner for an owner that cannot be fenced, and any other error when etcd could
// not answer; only nil allows acting as owner. Confirm right before a side effect outside etcd; a
// side effect inside etcd is better made conditional on OwnerCmp in its own transaction.
func ConfirmOwner(ctx context.Context, kv clientv3.KV, owner takeover.Owner) error {
	if err := ValidateOwner(owner); err != nil {
		return err
	}
	resp, err := kv.Txn(ctx).If(OwnerCmps(owner)...).Commit()
	if err != nil {
		return fmt.Errorf("ledger: confirm owner %s (token %d): %w", owner.ServerID, owner.Token, err)
	}
	if !resp.Succeeded {
		return fmt.Errorf("%w: election key %s is no longer at revision %d, or an older candidate's key exists", ErrSuperseded, owner.ElectionKey, owner.Token)
	}
	return nil
}

// OwnerCmps are the comparisons that hold exactly while owner's term holds and leads its election:
// OwnerCmp, and no candidate key of the election older than Token (election.LeadsCmp). In a history
// that only moves forward the first implies the second; a restore of etcd from a backup can bring a
// predecessor's key back, older than the successor's, while both keys keep their tokens, and then only
// the oldest may act (as Term.Guard decides). Put them in the If of every etcd transaction whose writes
// must be refused once the owner is superseded:
//
//	resp, err := kv.Txn(ctx).If(ledger.OwnerCmps(owner)...).Then(clientv3.OpPut(k, v)).Commit()
func OwnerCmps(owner takeover.Owner) []clientv3.Cmp {
	if ValidateOwner(owner) != nil {
		return []clientv3.Cmp{OwnerCmp(owner)}
	}
	return []clientv3.Cmp{OwnerCmp(owner), election.LeadsCmp(owner.ElectionKey, owner.Token)}
}

package shipping

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/temporal"

	"github.com/baton-run/baton/ledger"
)

// ErrTypeSuperseded is the application error type of an activity whose run's owner is superseded:
// retrying cannot help, the run must stop acting.
const ErrTypeSuperseded = "shipping.Superseded"

// Activities hold what the dispatcher's activities need.
type Activities struct {
	Etcd clientv3.KV
}

// AnnouncementKey is where Announce records the owner of (project, queue).
func AnnouncementKey(project, queue string) string {
	return fmt.Sprintf("/shipping/%s/%s/owner", project, queue)
}

// Announce records the run's owner and region, only while the run's owner still holds its term.
// ConfirmOwner guards side effects outside etcd; a write to etcd is fenced in its own transaction.
func (a *Activities) Announce(ctx context.Context, in Input) error {
	if err := ledger.ConfirmOwner(ctx, a.Etcd, in.Owner); err != nil {
		return fenced(err)
	}
	value := fmt.Sprintf("%s %d %s", in.Owner.ServerID, in.Owner.Token, in.Region)
	resp, err := a.Etcd.Txn(ctx).If(ledger.OwnerCmps(in.Owner)...).
		Then(clientv3.OpPut(AnnouncementKey(in.Owner.Project, in.Owner.Queue), value)).Commit()
	switch {
	case err != nil:
		return fmt.Errorf("announce: %w", err)
	case !resp.Succeeded:
		return fenced(ledger.ErrSuperseded)
	}
	return nil
}

func fenced(err error) error {
	if errors.Is(err, ledger.ErrSuperseded) || errors.Is(err, ledger.ErrInvalidOwner) {
		return temporal.NewNonRetryableApplicationError("owner superseded", ErrTypeSuperseded, err)
	}
	return err
}

package dispatcher_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// An application fences its own etcd writes with the Owner its dispatcher run was started with:
// they apply while the owner's term holds and are refused, by etcd itself, once a successor won.
func Example_ownerContract() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := etcdx.StartCluster(etcdx.Options{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()
	cli, err := cluster.NewClient()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cli.Close()

	el, err := election.New(cli, election.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer el.Close(ctx)
	term, err := el.Campaign(ctx, "billing", "orders", "node-a")
	if err != nil {
		fmt.Println(err)
		return
	}
	// A takeover hands its run this Owner; the run's activities receive it.
	owner := takeover.Owner{Project: "billing", Queue: "orders", ServerID: "node-a", Token: term.Token(), ElectionKey: term.Key()}

	write := func(value string) error {
		resp, err := cli.Txn(ctx).If(ledger.OwnerCmp(owner)).Then(clientv3.OpPut("/app/orders/last", value)).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return fmt.Errorf("%w: write of %s refused", ledger.ErrSuperseded, value)
		}
		return nil
	}
	fmt.Println("confirm:", ledger.ConfirmOwner(ctx, cli, owner))
	fmt.Println("write:", write("first"))

	// The term ends (here a resign; a crash or a partition ends it too) and a successor may win.
	if err := term.Resign(ctx); err != nil {
		fmt.Println(err)
		return
	}
	err = ledger.ConfirmOwner(ctx, cli, owner)
	fmt.Println("superseded:", errors.Is(err, ledger.ErrSuperseded))
	fmt.Println("write:", write("second"))
	// Output:
	// confirm: <nil>
	// write: <nil>
	// superseded: true
	// write: ledger: owner superseded: write of second refused
}

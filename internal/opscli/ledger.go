package opscli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/fxmodule"
)

// Ledger is `prog ledger KEY`: what the dispatch ledger says of one request, by its dispatch key
// (dispatcher.Request.Key): pending (begun, its handler not known to have finished) or done, and by
// which owner (server and token); or not begun. Exit 0 when etcd answered, 1 when it did not.
func Ledger(ctx context.Context, prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	c, err := LoadCommon(ignore...)
	if err != nil {
		fmt.Fprintf(stderr, "%s ledger: %v\n", prog, err)
		return ExitConfig
	}
	timeout, prefix, asJSON := DefaultStatusTimeout, dispatcher.DefaultLedgerPrefix, false
	fs := flag.NewFlagSet(prog+" ledger [flags] KEY", flag.ContinueOnError)
	c.AddFlags(fs)
	fs.Var(Duration(&timeout), "timeout", "bound of the call to etcd")
	fs.StringVar(&prefix, "ledger-prefix", prefix, "the dispatch ledger's etcd prefix (dispatcher.NewEtcdLedger's)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a line")
	key, err := parseWithArg(fs, args, stdout, "KEY")
	if err == nil {
		err = c.ReadSecrets()
	}
	if err == nil {
		err = c.Clients.Validate()
	}
	switch {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s ledger: %v\n", prog, err)
		return ExitConfig
	}
	var lc Hooks
	defer func() { lc.Stop(ctx, timeout) }()
	clientCfg := c.Clients
	if clientCfg.EtcdDialTimeout == 0 || clientCfg.EtcdDialTimeout > timeout {
		clientCfg.EtcdDialTimeout = timeout
	}
	etcd, err := fxmodule.NewEtcdClient(fxmodule.ClientParams{Config: clientCfg, Lifecycle: &lc})
	var rec dispatcher.LedgerRecord
	var found bool
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		rec, found, err = dispatcher.ReadLedgerRecord(cctx, etcd, prefix, key)
		cancel()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s ledger: %v\n", prog, err)
		return ExitUnclean
	}
	if asJSON {
		out := struct {
			Key    string                   `json:"key"`
			Found  bool                     `json:"found"`
			Record *dispatcher.LedgerRecord `json:"record,omitempty"`
		}{Key: key, Found: found}
		if found {
			out.Record = &rec
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(stdout, "%s\n", b)
		return ExitOK
	}
	if !found {
		fmt.Fprintf(stdout, "%s: not begun (no record under %s): not dispatched yet, or never accepted\n", key, dispatcher.LedgerRange(prefix))
		return ExitOK
	}
	fmt.Fprintf(stdout, "%s: %s by %s (token %d), etcd revision %d\n", key, rec.State, rec.ServerID, rec.Token, rec.Revision)
	return ExitOK
}

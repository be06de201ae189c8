package opscli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/takeover"
)

// Ledger is `prog ledger KEY`: what the dispatch ledger says of one request, by its dispatch key
// (dispatcher.Request.Key): pending (begun, its handler not known to have finished) or done, by
// which owner (server and token) and in which dispatcher runs (the runs of the project whose owner
// memo has that token, among the last -runs listed); or not begun. Exit 0 when etcd answered, 1 when
// it did not; runs Temporal could not list are a warning.
func Ledger(ctx context.Context, prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	c, err := LoadCommon(ignore...)
	if err != nil {
		fmt.Fprintf(stderr, "%s ledger: %v\n", prog, err)
		return ExitConfig
	}
	timeout, prefix, asJSON, maxRuns := DefaultStatusTimeout, dispatcher.DefaultLedgerPrefix, false, 500
	fs := flag.NewFlagSet(prog+" ledger [flags] KEY", flag.ContinueOnError)
	c.AddFlags(fs)
	fs.Var(Duration(&timeout), "timeout", "bound of the call to etcd")
	fs.StringVar(&prefix, "ledger-prefix", prefix, "the dispatch ledger's etcd prefix (dispatcher.NewEtcdLedger's)")
	fs.BoolVar(&asJSON, "json", false, "print JSON instead of a line")
	fs.IntVar(&maxRuns, "runs", maxRuns, "dispatcher runs of the project listed, newest first, to find the record's (0: none)")
	key, err := parseWithArg(fs, args, stdout, "KEY")
	if err == nil && (maxRuns < 0 || maxRuns > 100_000) {
		err = fmt.Errorf("-runs must be 0 to 100000, got %d", maxRuns)
	}
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
	var runs []ledgerRun
	var runsErr error
	if found && maxRuns > 0 {
		runs, runsErr = runsOfToken(ctx, c, &lc, timeout, rec.Token, maxRuns)
	}
	if runsErr != nil {
		fmt.Fprintf(stderr, "%s ledger: warning: the record's runs were not read: %v\n", prog, runsErr)
	}
	if asJSON {
		out := struct {
			Key    string                   `json:"key"`
			Found  bool                     `json:"found"`
			Record *dispatcher.LedgerRecord `json:"record,omitempty"`
			Runs   []ledgerRun              `json:"runs,omitempty"`
		}{Key: key, Found: found, Runs: runs}
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
	for _, r := range runs {
		fmt.Fprintf(stdout, "  run %s %s (%s)\n", r.WorkflowID, r.RunID, r.Status)
	}
	return ExitOK
}

// ledgerRun is a dispatcher run whose owner wrote a ledger record.
type ledgerRun struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id"`
	Status     string `json:"status"`
}

// runsOfToken lists the project's dispatcher runs, newest first, up to maxRuns, and returns those
// whose owner memo has token: the runs of the term that wrote a ledger record (a chain continued as
// new shares its token).
func runsOfToken(ctx context.Context, c Common, lc *Hooks, timeout time.Duration, token int64, maxRuns int) ([]ledgerRun, error) {
	if c.Cfg.Project == "" {
		return nil, errors.New("no project (BATON_PROJECT or -project) to list the runs of")
	}
	tc, err := fxmodule.NewTemporalClient(fxmodule.ClientParams{Config: c.Clients, Lifecycle: lc})
	if err != nil {
		return nil, err
	}
	var out []ledgerRun
	err = listRuns(ctx, tc, "WorkflowId STARTS_WITH "+strconv.Quote(takeover.WorkflowIDPrefix(c.Cfg.Project)), maxRuns, timeout, nil,
		func(info *workflowpb.WorkflowExecutionInfo) error {
			if owner, ok, err := takeover.DecodeOwner(nil, info.GetMemo()); err == nil && ok && owner.Token == token {
				out = append(out, ledgerRun{WorkflowID: info.GetExecution().GetWorkflowId(), RunID: info.GetExecution().GetRunId(),
					Status: statusName(info.GetStatus())})
			}
			return nil
		})
	return out, err
}

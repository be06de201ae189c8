package opscli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	workflowpb "go.temporal.io/api/workflow/v1"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/names"
	"github.com/baton-run/baton/takeover"
)

// Ledger is `prog ledger KEY` and `prog ledger find -type T -id ID -payload-sha256 H [-parent P]`:
// what the dispatch ledger says of one request, by its dispatch key (dispatcher.Request.Key), or by
// the request's identity fields, from which find computes the key with Request.Key and prints it:
// pending (begun, its handler not known to have finished) or done, by which owner (server and token)
// and in which dispatcher runs (the runs of the project whose owner memo has that token, among the
// last -runs listed); or not begun. KEY must have a dispatch key's shape (ledger.IsDispatchKey), so that a
// task ID given in its place is refused (exit 2) instead of read as a request never begun. Exit 0
// when etcd answered, 1 when it did not; runs Temporal could not list are a warning.
func Ledger(ctx context.Context, prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	o, err := parseLedger(prog, args, stdout, ignore)
	switch {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s ledger: %v\n", prog, err)
		return ExitConfig
	}
	c, timeout, prefix, asJSON, maxRuns, find, req, key := o.Common, o.timeout, o.prefix, o.json, o.maxRuns, o.find, o.req, o.key
	if find && !asJSON {
		// First, so that the key is known even when etcd cannot be read.
		fmt.Fprintf(stdout, "key %s (type %s, task %s, payload %s, parent %s)\n", key, names.Quote(req.Type), names.Quote(req.TaskID),
			req.PayloadSHA256, names.Quote(req.Parent))
	}
	var lc Hooks
	defer func() { lc.Stop(ctx, timeout) }()
	clientCfg := c.Clients
	if clientCfg.EtcdDialTimeout == 0 || clientCfg.EtcdDialTimeout > timeout {
		clientCfg.EtcdDialTimeout = timeout
	}
	etcd, err := lc.Etcd(ctx, clientCfg)
	var rec ledger.Record
	var found bool
	if err == nil {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		rec, found, err = ledger.ReadRecord(cctx, etcd, prefix, c.Cfg.Project, key)
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
			Key     string              `json:"key"`
			Request *dispatcher.Request `json:"request,omitempty"`
			Found   bool                `json:"found"`
			Record  *ledger.Record      `json:"record,omitempty"`
			Runs    []ledgerRun         `json:"runs,omitempty"`
		}{Key: key, Found: found, Runs: runs}
		if find {
			out.Request = &req
		}
		if found {
			out.Record = &rec
		}
		b, _ := json.Marshal(out)
		fmt.Fprintf(stdout, "%s\n", b)
		return ExitOK
	}
	if !found {
		fmt.Fprintf(stdout, "%s: not begun (no record under %s): not dispatched yet, or never accepted\n", key, ledger.Range(prefix, c.Cfg.Project))
		return ExitOK
	}
	fmt.Fprintf(stdout, "%s: %s by %s (token %d), etcd revision %d\n", key, rec.State, rec.ServerID, rec.Token, rec.Revision)
	for _, r := range runs {
		fmt.Fprintf(stdout, "  run %s %s (%s)\n", r.WorkflowID, r.RunID, r.Status)
	}
	return ExitOK
}

// ledgerOptions is the configuration of `ledger` and `ledger find`.
type ledgerOptions struct {
	Common
	timeout time.Duration
	prefix  string // the ledger's
	json    bool
	maxRuns int
	find    bool               // ledger find: key is req's
	req     dispatcher.Request // ledger find's fields
	key     string
}

// parseLedger reads the environment and the flags of `prog ledger KEY` or `prog ledger find` and
// validates them.
func parseLedger(prog string, args []string, stdout io.Writer, ignore []string) (ledgerOptions, error) {
	o := ledgerOptions{timeout: DefaultStatusTimeout, prefix: ledger.DefaultPrefix, maxRuns: 500}
	var err error
	if o.Common, err = LoadCommon(ignore...); err != nil {
		return o, err
	}
	o.find = len(args) > 0 && args[0] == "find"
	name := prog + " ledger [flags] KEY"
	if o.find {
		name, args = prog+" ledger find [flags]", args[1:]
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	o.AddFlags(fs)
	fs.Var(Duration(&o.timeout), "timeout", "bound of the call to etcd")
	fs.StringVar(&o.prefix, "ledger-prefix", o.prefix, "the dispatch ledger's etcd prefix (ledger.Config.Prefix)")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a line")
	fs.IntVar(&o.maxRuns, "runs", o.maxRuns, "dispatcher runs of the project listed, newest first, to find the record's (0: none)")
	if o.find {
		fs.StringVar(&o.req.Type, "type", "", "the request's type (dispatcher.Request.Type), as the producer sent it")
		fs.StringVar(&o.req.TaskID, "id", "", "the task ID the request belongs to (dispatcher.Request.TaskID)")
		fs.StringVar(&o.req.PayloadSHA256, "payload-sha256", "", "SHA-256 (64 hex digits) of the request's payload (dispatcher.Request.PayloadSHA256)")
		fs.StringVar(&o.req.Parent, "parent", "", "the parent session or request (dispatcher.Request.Parent), if the producer gave one")
		if err = Parse(fs, args, stdout); err == nil {
			err = checkRequest(o.req)
		}
		o.key = o.req.Key()
	} else if o.key, err = parseWithArg(fs, args, stdout, "KEY"); err == nil && !ledger.IsDispatchKey(o.key) {
		err = fmt.Errorf("KEY must be a dispatch key, %d lowercase hex digits (dispatcher.Request.Key: the SHA-256 of the request's "+
			"type, task ID, payload SHA-256 and parent), got %s; to find a request's key from those fields: "+
			"%s ledger find -type T -id ID -payload-sha256 H [-parent P]", ledger.DispatchKeyLen, names.Quote(o.key), prog)
	}
	switch {
	case err != nil:
		return o, err
	case o.maxRuns < 0 || o.maxRuns > 100_000:
		return o, fmt.Errorf("-runs must be 0 to 100000, got %d", o.maxRuns)
	}
	if err := o.checkNames(); err != nil {
		return o, fmt.Errorf("%w: the ledger keeps each project's records apart", err)
	}
	if err := o.ReadSecrets(); err != nil {
		return o, err
	}
	return o, o.Explain(o.Clients.Validate())
}

// checkRequest checks the request find was given, naming the flag of the first field that breaks
// dispatcher.Request.Validate's rules: each field is validated alone, beside fields known good, so
// that the rules stay the dispatcher's and the error still names the flag.
func checkRequest(r dispatcher.Request) error {
	good := dispatcher.Request{Type: "t", TaskID: "t", PayloadSHA256: strings.Repeat("0", ledger.DispatchKeyLen)}
	for _, f := range []struct {
		flag string
		set  func(*dispatcher.Request)
	}{
		{"-type", func(x *dispatcher.Request) { x.Type = r.Type }},
		{"-id", func(x *dispatcher.Request) { x.TaskID = r.TaskID }},
		{"-payload-sha256", func(x *dispatcher.Request) { x.PayloadSHA256 = r.PayloadSHA256 }},
		{"-parent", func(x *dispatcher.Request) { x.Parent = r.Parent }},
	} {
		x := good
		f.set(&x)
		if err := x.Validate(); err != nil {
			return fmt.Errorf("%s: %w", f.flag, err)
		}
	}
	return r.Validate()
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
	tc, err := lc.Temporal(c.Clients)
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

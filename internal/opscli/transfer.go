package opscli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/names"
	"github.com/baton-run/baton/registry"
)

// Transfer is `prog transfer [-project PROJECT] QUEUE [-to SERVER]`: it asks the queue's leader to
// hand the queue over gracefully (balance.RequestTransfer, the designated-successor path, fenced as
// every handover is) to SERVER, or to the best candidate (the next in line in etcd, else a worker of
// the queue online in the registry), and waits until the new leader holds it. It refuses, saying why,
// when nobody leads, when SERVER leads already, or when SERVER does not stand for the queue (neither a
// candidate in etcd nor an online worker of the queue in the registry). The older form
// `prog transfer PROJECT QUEUE` is still accepted, with a note on stderr.
func Transfer(ctx context.Context, prog string, args []string, stdout, stderr io.Writer, ignore ...string) int {
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "%s transfer: %s\n", prog, fmt.Sprintf(format, a...))
		return code
	}
	o, err := parseTransfer(prog, args, stdout, stderr, ignore)
	switch {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		return fail(ExitConfig, "%v", err)
	}
	c, to, timeout, project, queue := o.Common, o.to, o.timeout, o.Cfg.Project, o.queue
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var lc Hooks
	defer func() { lc.Stop(ctx, DefaultStatusTimeout) }()
	etcd, err := lc.Etcd(ctx, c.Clients)
	if err != nil {
		return fail(ExitUnclean, "%v", err)
	}
	keys := electionKeys(c.Cfg)
	line, err := candidates(ctx, etcd, keys, project, queue)
	switch {
	case err != nil:
		return fail(ExitUnclean, "reading the candidates of %s: %v", queue, err)
	case len(line) == 0:
		return fail(ExitUnclean, "nobody leads %s/%s: nothing to transfer", project, queue)
	}
	leader := line[0]
	online := func() []string { return nil }
	if rdb, err := lc.Redis(c.Clients); err == nil {
		regCfg := c.Cfg.Registry
		regCfg.Project = project
		if reg, err := registry.New(rdb, regCfg); err == nil {
			online = func() []string { return onlineWorkers(ctx, reg, queue) }
		}
	}
	if to, err = chooseTarget(line, online, to, queue); err != nil {
		return fail(ExitUnclean, "%v", err)
	}
	began := time.Now()
	lease, err := balance.RequestTransfer(ctx, etcd, balance.Keys{ElectionPrefix: keys.Prefix}, project, queue, balance.TransferRequest{To: to}, timeout)
	if err != nil {
		return fail(ExitUnclean, "%v", err)
	}
	moved, err := awaitNewLeader(ctx, etcd, keys, project, queue, leader.ID)
	if err != nil {
		_, _ = etcd.Revoke(context.WithoutCancel(ctx), lease) // withdraw the request
		return fail(ExitUnclean, "%s still leads %s after %v (a leader of a Baton release without transfers ignores the request): withdrawn", leader.ID, queue, timeout)
	}
	reportMove(stdout, queue, leader, moved, time.Since(began))
	if moved.ID != to {
		return fail(ExitUnclean, "the queue went to %s, not to %s", moved.ID, to)
	}
	return ExitOK
}

// transferOptions is the configuration of `transfer`.
type transferOptions struct {
	Common
	queue, to string
	timeout   time.Duration // how long to wait for the new leader
}

// parseTransfer reads the environment and the flags of `prog transfer [-project P] QUEUE` (or the
// older `prog transfer PROJECT QUEUE`, noted on stderr) and validates them.
func parseTransfer(prog string, args []string, stdout, stderr io.Writer, ignore []string) (transferOptions, error) {
	var o transferOptions
	var err error
	if o.Common, err = LoadCommon(ignore...); err != nil {
		return o, err
	}
	o.timeout = DefaultMoveTimeout(o.Cfg)
	fs := flag.NewFlagSet(prog+" transfer [flags] QUEUE", flag.ContinueOnError)
	o.AddFlags(fs)
	fs.StringVar(&o.to, "to", "", "the worker (server ID) to move the queue to; default: the best candidate")
	fs.Var(Duration(&o.timeout), "timeout", "how long to wait for the new leader")
	pos, err := parseArgs(fs, args, stdout)
	switch {
	case err != nil:
		return o, err
	case len(pos) == 0:
		return o, errors.New("QUEUE is required")
	case len(pos) > 2:
		return o, fmt.Errorf("unexpected argument %q after QUEUE", pos[2])
	case len(pos) == 2 && o.Cfg.Project != "" && o.Cfg.Project != pos[0] && projectFlagGiven(fs):
		return o, fmt.Errorf("PROJECT %s and -project %s differ: give the project once, with -project", names.Quote(pos[0]), names.Quote(o.Cfg.Project))
	case len(pos) == 2:
		fmt.Fprintf(stderr, "%s transfer: note: PROJECT before QUEUE is deprecated; use -project %s (or %s) like the other commands\n",
			prog, pos[0], envOf("Project"))
		o.Cfg.Project, pos = pos[0], pos[1:]
	}
	o.queue = pos[0]
	if err := o.ReadSecrets(); err != nil {
		return o, err
	}
	if err := o.checkNames(); err != nil {
		return o, err
	}
	if err := errors.Join(election.ValidateName("QUEUE", o.queue), o.Explain(o.Clients.Validate())); err != nil {
		return o, err
	}
	if o.to != "" {
		return o, election.ValidateName("-to", o.to)
	}
	return o, nil
}

// chooseTarget checks the worker asked for (to), or picks the best candidate when to is empty.
func chooseTarget(line []election.Leader, online func() []string, to, queue string) (string, error) {
	leader := line[0]
	switch {
	case to == leader.ID:
		return "", fmt.Errorf("%s leads %s already (token %d)", to, queue, leader.Token)
	case to == "":
		if to = bestCandidate(line, online(), leader.ID); to == "" {
			return "", fmt.Errorf("no other worker stands for %s: start one that serves it", queue)
		}
	case !slices.ContainsFunc(line, func(l election.Leader) bool { return l.ID == to }) && !slices.Contains(online(), to):
		return "", fmt.Errorf("%s does not stand for %s: it is neither a candidate in etcd nor an online worker of the queue in the registry", to, queue)
	}
	return to, nil
}

// awaitNewLeader polls the queue's candidates until another worker than old leads, or ctx ends.
func awaitNewLeader(ctx context.Context, etcd *clientv3.Client, keys election.Keys, project, queue, old string) (election.Leader, error) {
	for {
		line, err := candidates(ctx, etcd, keys, project, queue)
		if err == nil && len(line) > 0 && line[0].ID != old {
			return line[0], nil
		}
		select {
		case <-ctx.Done():
			return election.Leader{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// candidates returns the candidates of (project, queue), the leader first (etcd's order: create
// revision).
func candidates(ctx context.Context, etcd *clientv3.Client, keys election.Keys, project, queue string) ([]election.Leader, error) {
	resp, err := etcd.Get(ctx, keys.Candidates(project, queue), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]election.Leader, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out = append(out, election.Leader{ID: string(kv.Value), Token: kv.CreateRevision, Key: string(kv.Key)})
	}
	return out, nil
}

// bestCandidate is the worker a transfer without -to goes to: the next in line, else an online worker
// of the queue (the first by server ID), never the leader.
func bestCandidate(line []election.Leader, online []string, leader string) string {
	for _, l := range line {
		if l.ID != leader {
			return l.ID
		}
	}
	slices.Sort(online)
	for _, id := range online {
		if id != leader {
			return id
		}
	}
	return ""
}

// onlineWorkers lists the ONLINE workers of queue in the registry (those read before a failure).
func onlineWorkers(ctx context.Context, reg *registry.Registry, queue string) []string {
	ws, _ := allWorkers(ctx, reg, registry.Filter{Queue: queue, Status: registry.StatusOnline}, DefaultStatusTimeout)
	out := make([]string, 0, len(ws))
	for _, w := range ws {
		out = append(out, w.ServerID)
	}
	return out
}

// parseWithArgs parses fs over args, which must hold exactly one positional argument per name, with
// flags before, between or after them.
func parseWithArgs(fs *flag.FlagSet, args []string, stdout io.Writer, names ...string) ([]string, error) {
	pos, err := parseArgs(fs, args, stdout)
	switch {
	case err != nil:
		return nil, err
	case len(pos) < len(names):
		return nil, fmt.Errorf("%s is required", names[len(pos)])
	case len(pos) > len(names):
		return nil, fmt.Errorf("unexpected argument %q after %s", pos[len(names)], names[len(names)-1])
	}
	return pos, nil
}

// parseArgs parses fs over args and returns the positional arguments, with flags before, between or
// after them.
func parseArgs(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	var pos []string
	for {
		if err := parseFlags(fs, args, stdout); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos, args = append(pos, fs.Arg(0)), fs.Args()[1:]
	}
}

// projectFlagGiven reports whether -project was on the command line (not only in the environment).
func projectFlagGiven(fs *flag.FlagSet) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "project" })
	return given
}

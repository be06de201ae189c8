package opscli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/registry"
)

// Drain is `prog drain SERVER` (undrain false) and `prog undrain SERVER`: it asks the worker SERVER to
// hand its queues over and stand for none (registry.Registry.Drain), or takes that back, on every
// queue the worker is registered for in the project. The worker learns it at its next registry
// heartbeat. With -wait (the default) drain then waits, at most -timeout (DefaultMoveTimeout), until
// no queue is led by SERVER, printing where each queue it led went, as transfer does; it exits 1 on
// timeout, naming the queues SERVER still leads. ignore names prog's own BATON_* variables.
func Drain(ctx context.Context, prog string, undrain bool, args []string, stdout, stderr io.Writer, ignore ...string) int {
	verb := "drain"
	if undrain {
		verb = "undrain"
	}
	o, err := parseDrain(prog, verb, args, stdout, ignore)
	switch {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s %s: %v\n", prog, verb, err)
		return ExitConfig
	}
	c, server, timeout, wait, waitFor := o.Common, o.server, o.timeout, o.wait, o.waitFor
	if wait {
		timeout = min(timeout, waitFor)
	}
	var lc Hooks
	defer func() { lc.Stop(ctx, timeout) }()
	rdb, err := lc.Redis(c.Clients)
	var reg *registry.Registry
	if err == nil {
		regCfg := c.Cfg.Registry
		regCfg.Project = c.Cfg.Project
		reg, err = registry.New(rdb, regCfg)
	}
	var etcd *clientv3.Client
	if err == nil && wait {
		etcd, err = lc.Etcd(ctx, c.Clients)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", prog, verb, err)
		return ExitUnclean
	}
	queues, err := queuesOf(ctx, reg, server, timeout)
	switch {
	case err != nil:
		fmt.Fprintf(stderr, "%s %s: listing the worker registry: %v\n", prog, verb, err)
		return ExitUnclean
	case len(queues) == 0:
		fmt.Fprintf(stderr, "%s %s: %s is registered for no queue of project %s (online or draining)\n", prog, verb, server, c.Cfg.Project)
		return ExitUnclean
	}
	set := reg.Drain
	if undrain {
		set = reg.Undrain
	}
	code := ExitOK
	began := time.Now()
	for _, q := range queues {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := set(cctx, q, server)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "%s %s: %s on %s: %v\n", prog, verb, server, q, err)
			code = ExitUnclean
			continue
		}
		fmt.Fprintf(stdout, "%s: %s on %s\n", verb, server, q)
	}
	if !wait || code != ExitOK {
		return code
	}
	if still := awaitDrained(ctx, stdout, etcd, electionKeys(c.Cfg), c.Cfg.Project, server, queues, began, waitFor); len(still) > 0 {
		fmt.Fprintf(stderr, "%s %s: %s still leads %s after %v: %s\n", prog, verb, server, strings.Join(still, ", "), waitFor,
			"a queue no other worker stands for stays with the draining worker (start one that serves it), or -timeout is too short")
		return ExitUnclean
	}
	return ExitOK
}

// drainOptions is the configuration of `drain` and `undrain`.
type drainOptions struct {
	Common
	server  string
	timeout time.Duration // bound of every call to a server
	wait    bool          // drain: wait until server leads no queue
	waitFor time.Duration // how long wait waits
}

// parseDrain reads the environment and the flags of `prog verb SERVER` and validates them.
func parseDrain(prog, verb string, args []string, stdout io.Writer, ignore []string) (drainOptions, error) {
	var o drainOptions
	var err error
	if o.Common, err = LoadCommon(ignore...); err != nil {
		return o, err
	}
	undrain := verb == "undrain"
	o.timeout, o.wait, o.waitFor = DefaultStatusTimeout, !undrain, DefaultMoveTimeout(o.Cfg)
	fs := flag.NewFlagSet(prog+" "+verb+" [flags] SERVER", flag.ContinueOnError)
	o.AddFlags(fs)
	if undrain {
		fs.Var(Duration(&o.timeout), "timeout", "bound of every call to a server")
	} else {
		fs.BoolVar(&o.wait, "wait", o.wait, "wait until no queue is led by SERVER and print where each went; -wait=false returns once the registry says DRAINING")
		fs.Var(Duration(&o.waitFor), "timeout", fmt.Sprintf("how long -wait waits for SERVER's queues to move (%s + the election's stop budget + %s)",
			envOf("Registry.HeartbeatInterval"), envOf("Election.TTL")))
	}
	if o.server, err = parseWithArg(fs, args, stdout, "SERVER"); err != nil {
		return o, err
	}
	if err := o.ReadSecrets(); err != nil {
		return o, err
	}
	if err := election.ValidateName("SERVER", o.server); err != nil {
		return o, err
	}
	if err := o.checkNames(); err != nil {
		return o, err
	}
	return o, o.Explain(o.Clients.Validate())
}

// awaitDrained waits, at most waitFor, until server leads none of queues, and prints where each queue
// it led went (with awaitNewLeader, transfer's wait). It returns the queues server still leads.
func awaitDrained(ctx context.Context, w io.Writer, etcd *clientv3.Client, keys election.Keys, project, server string,
	queues []string, began time.Time, waitFor time.Duration) (still []string) {
	ctx, cancel := context.WithDeadline(ctx, began.Add(waitFor))
	defer cancel()
	for _, q := range queues {
		line, err := candidates(ctx, etcd, keys, project, q)
		switch {
		case err != nil:
			still = append(still, q+" (unread: "+err.Error()+")")
			continue
		case len(line) == 0:
			fmt.Fprintf(w, "%s: nobody leads it\n", q)
			continue
		case line[0].ID != server:
			fmt.Fprintf(w, "%s: led by %s (token %d)\n", q, line[0].ID, line[0].Token)
			continue
		}
		moved, err := awaitNewLeader(ctx, etcd, keys, project, q, server)
		if err != nil {
			still = append(still, q)
			continue
		}
		reportMove(w, q, line[0], moved, time.Since(began))
	}
	return still
}

// queuesOf lists the queues server is registered for and not OFFLINE on.
func queuesOf(ctx context.Context, reg *registry.Registry, server string, timeout time.Duration) ([]string, error) {
	ws, err := allWorkers(ctx, reg, registry.Filter{}, timeout)
	var out []string
	for _, w := range ws {
		if w.ServerID == server && w.Status != registry.StatusOffline {
			out = append(out, w.Queue)
		}
	}
	return out, err
}

// allWorkers pages through the registry's workers that match f, each page bounded by timeout.
func allWorkers(ctx context.Context, reg *registry.Registry, f registry.Filter, timeout time.Duration) ([]registry.Worker, error) {
	var out []registry.Worker
	cursor := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		page, next, err := reg.List(cctx, f, cursor, registry.MaxListLimit)
		cancel()
		if err != nil {
			return out, err
		}
		out = append(out, page...)
		if cursor = next; cursor == "" {
			return out, nil
		}
	}
}

// parseWithArg parses fs over args, which must hold exactly one positional argument, named name in
// the error.
func parseWithArg(fs *flag.FlagSet, args []string, stdout io.Writer, name string) (string, error) {
	pos, err := parseWithArgs(fs, args, stdout, name)
	if err != nil {
		return "", err
	}
	return pos[0], nil
}

package opscli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/registry"
)

// Drain is `prog drain SERVER` (undrain false) and `prog undrain SERVER`: it asks the worker SERVER to
// hand its queues over and stand for none (registry.Registry.Drain), or takes that back, on every
// queue the worker is registered for in the project. The worker learns it at its next registry
// heartbeat. ignore names prog's own BATON_* variables.
func Drain(ctx context.Context, prog string, undrain bool, args []string, stdout, stderr io.Writer, ignore ...string) int {
	verb := "drain"
	if undrain {
		verb = "undrain"
	}
	c, err := LoadCommon(ignore...)
	if err != nil {
		fmt.Fprintf(stderr, "%s %s: %v\n", prog, verb, err)
		return ExitConfig
	}
	timeout := DefaultStatusTimeout
	fs := flag.NewFlagSet(prog+" "+verb+" [flags] SERVER", flag.ContinueOnError)
	c.AddFlags(fs)
	fs.Var(Duration(&timeout), "timeout", "bound of every call to a server")
	server, err := parseWithArg(fs, args, stdout, "SERVER")
	if err == nil {
		err = c.ReadSecrets()
	}
	if err == nil {
		err = election.ValidateName("SERVER", server)
	}
	if err == nil {
		err = c.Clients.Validate()
	}
	switch {
	case errors.Is(err, ErrHelp):
		return ExitOK
	case err != nil:
		fmt.Fprintf(stderr, "%s %s: %v\n", prog, verb, err)
		return ExitConfig
	}
	var lc Hooks
	defer func() { lc.Stop(ctx, timeout) }()
	rdb, err := fxmodule.NewRedisClient(fxmodule.ClientParams{Config: c.Clients, Lifecycle: &lc})
	var reg *registry.Registry
	if err == nil {
		regCfg := c.Cfg.Registry
		regCfg.Project = c.Cfg.Project
		reg, err = registry.New(rdb, regCfg)
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
	return code
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

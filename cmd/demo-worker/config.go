package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/cmd/demo-worker/contract"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/internal/opscli"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
)

// ownEnv lists this command's own BATON_* variables, which baton.LoadEnv must not refuse as unknown.
func ownEnv() []string { return contract.Env() }

// runOptions is the configuration of `demo-worker run`.
type runOptions struct {
	opscli.Common
	httpAddr        string
	shutdownTimeout time.Duration
	nodeStopBudget  time.Duration // the Node's share of shutdownTimeout (baton.CheckedConfig.StopBudget)
	startTimeout    time.Duration
	logLevel        zapcore.Level
	events          string // "" or "stdout": where Baton's typed events go (package event)
	pod             podOptions
}

// parseRun reads the environment and the flags of `demo-worker run` and validates everything.
func parseRun(args []string, stdout io.Writer) (runOptions, error) {
	var o runOptions
	var err error
	if o.Common, err = opscli.LoadCommon(ownEnv()...); err != nil {
		return o, err
	}
	o.httpAddr, o.startTimeout, o.logLevel = contract.DefaultHTTPAddr, contract.DefaultStartTimeout, zapcore.InfoLevel
	_, shutdownGiven := os.LookupEnv(contract.EnvShutdownTimeout)
	if v, ok := os.LookupEnv(contract.EnvHTTPAddr); ok {
		o.httpAddr = strings.TrimSpace(v)
	}
	if v, ok := os.LookupEnv(contract.EnvLogLevel); ok {
		if err := o.logLevel.Set(strings.TrimSpace(v)); err != nil {
			return o, fmt.Errorf("%s: %w", contract.EnvLogLevel, err)
		}
	}
	o.events = strings.TrimSpace(os.Getenv(contract.EnvEvents))
	if err := o.pod.loadEnv(); err != nil {
		return o, err
	}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{contract.EnvShutdownTimeout, &o.shutdownTimeout}, {contract.EnvStartTimeout, &o.startTimeout}} {
		if v, ok := os.LookupEnv(d.env); ok {
			if err := (opscli.Duration(d.dst)).Set(strings.TrimSpace(v)); err != nil {
				return o, fmt.Errorf("%s: %w", d.env, err)
			}
		}
	}

	fs := flag.NewFlagSet("demo-worker run", flag.ContinueOnError)
	o.AddFlags(fs)
	c := &o.Cfg
	fs.StringVar(&c.ServerID, "server-id", c.ServerID, "this process's ID in elections, heartbeats and the registry (BATON_SERVER_ID; default <host>-<pid>-<random>)")
	fs.StringVar(&c.Version, "version", c.Version, "this build's version, published to the other workers so a rolling deploy moves queues forward only (BATON_VERSION; default the build's module version, or dev)")
	fs.StringVar(&o.httpAddr, "http", o.httpAddr, "listen address of /metrics, /healthz, /readyz and /status, HOST:PORT, or fd:N to serve on a listening socket inherited as file descriptor N ("+contract.EnvHTTPAddr+")")
	fs.Var(opscli.Duration(&o.shutdownTimeout), "shutdown-timeout", "bound of the graceful stop: the Temporal workers' drain, then the Node's handover ("+contract.EnvShutdownTimeout+"; default: the quiesce's bound and the terminate's for the drain, plus the Node's stop budget and a second)")
	fs.Var(opscli.Duration(&o.startTimeout), "start-timeout", "bound of the start ("+contract.EnvStartTimeout+")")
	fs.Var(&o.logLevel, "log-level", "debug, info, warn or error ("+contract.EnvLogLevel+"; default info)")
	fs.StringVar(&o.events, "events", o.events, "stdout: write Baton's typed events (package event) as JSON lines on standard output, for tools; empty: none ("+contract.EnvEvents+")")
	fs.Var(opscli.Duration(&c.Election.TTL), "ttl", fmt.Sprintf("etcd lease TTL, whole seconds (BATON_ELECTION_TTL; default %v)", election.DefaultConfig().TTL))
	fs.Var(opscli.Duration(&c.Heartbeat.Interval), "heartbeat-interval", fmt.Sprintf("dispatcher heartbeat interval (BATON_HEARTBEAT_INTERVAL; default %v)", heartbeat.DefaultConfig().Interval))
	fs.Var(opscli.Duration(&c.Reconciler.Interval), "reconcile-interval", fmt.Sprintf("reconciler cycle (BATON_RECONCILE_INTERVAL; default %v)", reconciler.DefaultConfig().Interval))
	fs.Var(opscli.Duration(&c.Reconciler.StaleAfter), "stale-after", fmt.Sprintf("heartbeat age that makes a dispatcher stale (BATON_RECONCILE_STALE_AFTER; default %v)", reconciler.DefaultConfig().StaleAfter))
	fs.Var(opscli.Duration(&c.Registry.HeartbeatInterval), "registry-heartbeat-interval", fmt.Sprintf("worker registry heartbeat interval (BATON_REGISTRY_HEARTBEAT_INTERVAL; default %v)", registry.DefaultConfig().HeartbeatInterval))
	o.pod.addFlags(fs)
	if err := opscli.Parse(fs, args, stdout); err != nil {
		return o, err
	}
	fs.Visit(func(f *flag.Flag) { shutdownGiven = shutdownGiven || f.Name == "shutdown-timeout" })
	if err := o.ReadSecrets(); err != nil {
		return o, err
	}
	if o.events != "" && o.events != "stdout" {
		return o, fmt.Errorf("-events (%s): must be empty or stdout, got %q", contract.EnvEvents, o.events)
	}
	if err := o.pod.check(); err != nil {
		return o, err
	}
	if o.Cfg.ServerID == "" {
		// Chosen here rather than by the Node, so that the Temporal workers and the startup log use it too.
		o.Cfg.ServerID = baton.DefaultServerID()
	}
	if o.Cfg.Version == "" {
		o.Cfg.Version = buildVersion()
	}
	checked, err := o.Cfg.Check()
	if err != nil {
		return o, err
	}
	if err := o.Clients.Validate(); err != nil {
		return o, err
	}
	if err := checkListenAddr(o.httpAddr); err != nil {
		return o, fmt.Errorf("flag -http (%s): %w", contract.EnvHTTPAddr, err)
	}
	// The Node's stop is left the time a graceful handover of every term may take; a shorter stop
	// would cut into it and leave the queues to the lease expiry (a TTL without a leader).
	o.nodeStopBudget = checked.StopBudget()
	if !shutdownGiven {
		o.shutdownTimeout = contract.DefaultShutdownTimeout(checked)
	}
	if least := contract.MinShutdownTimeout(checked); o.shutdownTimeout < least {
		return o, fmt.Errorf("flag -shutdown-timeout (%s) must be at least %v: %v for the Temporal workers to drain, "+
			"%v for the Node's graceful handover (baton.CheckedConfig.StopBudget) and %v for the rest; got %v",
			contract.EnvShutdownTimeout, least, contract.MinDrain, o.nodeStopBudget, contract.StopSlack, o.shutdownTimeout)
	}
	return o, nil
}

// drainTimeout is the Temporal workers' share of the stop (their WorkerStopTimeout): what is left
// of -shutdown-timeout once the Node's handover and the rest of the stop are set aside.
func (o runOptions) drainTimeout() time.Duration {
	return o.shutdownTimeout - o.nodeStopBudget - contract.StopSlack
}

// buildVersion is the demo worker's version when none is given: the main module's version as the
// build recorded it (a tagged release, or the pseudo-version of a go install), else "dev" (a build
// from a work tree records none). Every demo worker is versioned, so the rollout metrics and rules
// have something to show.
func buildVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/fxmodule"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
)

// The environment variables of this command (beyond baton.EnvVars and fxmodule.ClientEnvVars).
const (
	envHTTPAddr        = "BATON_HTTP_ADDR"
	envLogLevel        = "BATON_LOG_LEVEL"
	envShutdownTimeout = "BATON_SHUTDOWN_TIMEOUT"
	envStartTimeout    = "BATON_START_TIMEOUT"
	envEvents          = "BATON_EVENTS"
	// envDevstackRedis is written by integration/cmd/devstack into its env file; it is ignored, so
	// that sourcing that file is enough to run a worker.
	envDevstackRedis = "BATON_DEVSTACK_REDIS"
)

// Defaults of the settings of this command.
const (
	defaultHTTPAddr        = ":8080"
	defaultShutdownTimeout = 15 * time.Second
	defaultStartTimeout    = 30 * time.Second
	defaultStatusTimeout   = 5 * time.Second
)

// The graceful stop's budget, split between its two waits (see appOptions for their order).
const (
	// resignSteps is how many ResignTimeouts the Node's stop may take: the election's handover of a
	// term (OnResign, the wait for the leader callback, the delete of the key; terms hand over in
	// parallel) and then the revoke of the session's lease.
	resignSteps = 4
	// minDrain is the least time the Temporal workers get to finish the tasks they hold.
	minDrain = time.Second
	// stopSlack is kept for the rest of the stop: the HTTP server, the clients, Fx itself.
	stopSlack = time.Second
)

// ignoredEnv lists the BATON_* variables baton.LoadEnv must not refuse as unknown.
func ignoredEnv() []string {
	return append(fxmodule.ClientEnvVars(), envHTTPAddr, envLogLevel, envShutdownTimeout, envStartTimeout, envEvents, envDevstackRedis)
}

// common is the configuration both subcommands share: the Baton settings and how to reach the servers.
type common struct {
	cfg     baton.Config
	clients fxmodule.ClientConfig
	// secret files given by flag; read after parsing so that a flag order does not matter.
	etcdPasswordFile, redisPasswordFile, temporalAPIKeyFile string
}

// runOptions is the configuration of `demo-worker run`.
type runOptions struct {
	common
	httpAddr        string
	shutdownTimeout time.Duration
	startTimeout    time.Duration
	logLevel        zapcore.Level
	events          string // "" or "stdout": where Baton's typed events go (package event)
}

// statusOptions is the configuration of `demo-worker status`.
type statusOptions struct {
	common
	timeout     time.Duration
	json        bool
	queuesGiven bool // -queues or BATON_QUEUES; otherwise the queues are discovered
}

// errHelp is returned by the parsers after printing the usage for -h.
var errHelp = flag.ErrHelp

func loadCommon() (common, error) {
	var c common
	var err error
	if c.cfg, err = baton.LoadEnv(baton.Config{}, ignoredEnv()...); err != nil {
		return c, err
	}
	if c.clients, err = fxmodule.LoadClientEnv(fxmodule.ClientConfig{}); err != nil {
		return c, err
	}
	return c, nil
}

// addFlags registers the flags of the project and of the connections, with the environment's values
// as defaults.
func (c *common) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.cfg.Project, "project", c.cfg.Project, "project the queues belong to (BATON_PROJECT)")
	fs.Var(listValue{&c.cfg.Queues}, "queues", "comma-separated task queues (BATON_QUEUES)")

	fs.Var(listValue{&c.clients.EtcdEndpoints}, "etcd-endpoints", "comma-separated etcd endpoints (BATON_ETCD_ENDPOINTS)")
	fs.StringVar(&c.clients.EtcdUsername, "etcd-username", c.clients.EtcdUsername, "etcd user (BATON_ETCD_USERNAME)")
	fs.StringVar(&c.etcdPasswordFile, "etcd-password-file", "", "file holding the etcd password (or BATON_ETCD_PASSWORD)")
	tlsFlags(fs, "etcd", &c.clients.EtcdTLS)

	fs.StringVar(&c.clients.TemporalAddress, "temporal-address", c.clients.TemporalAddress, "Temporal frontend host:port (BATON_TEMPORAL_ADDRESS; default localhost:7233)")
	fs.StringVar(&c.clients.TemporalNamespace, "temporal-namespace", c.clients.TemporalNamespace, "Temporal namespace (BATON_TEMPORAL_NAMESPACE; default default)")
	fs.StringVar(&c.temporalAPIKeyFile, "temporal-api-key-file", "", "file holding the Temporal API key (or BATON_TEMPORAL_API_KEY)")
	tlsFlags(fs, "temporal", &c.clients.TemporalTLS)
	fs.BoolVar(&c.clients.TemporalTLSDisabled, "temporal-tls-disabled", c.clients.TemporalTLSDisabled,
		"no TLS to Temporal even with an API key, for a TLS-terminating proxy on this host (BATON_TEMPORAL_TLS_DISABLED)")

	fs.StringVar(&c.clients.RedisAddr, "redis-addr", c.clients.RedisAddr, "Redis host:port (BATON_REDIS_ADDR; default localhost:6379)")
	fs.StringVar(&c.clients.RedisUsername, "redis-username", c.clients.RedisUsername, "Redis ACL user (BATON_REDIS_USERNAME)")
	fs.StringVar(&c.redisPasswordFile, "redis-password-file", "", "file holding the Redis password (or BATON_REDIS_PASSWORD)")
	tlsFlags(fs, "redis", &c.clients.RedisTLS)
}

func tlsFlags(fs *flag.FlagSet, name string, t *fxmodule.TLSFiles) {
	env := "BATON_" + strings.ToUpper(name)
	fs.StringVar(&t.CAFile, name+"-ca-file", t.CAFile, "PEM file of the CAs of the "+name+" server ("+env+"_CA_FILE)")
	fs.StringVar(&t.CertFile, name+"-cert-file", t.CertFile, "PEM client certificate for "+name+" mTLS ("+env+"_CERT_FILE)")
	fs.StringVar(&t.KeyFile, name+"-key-file", t.KeyFile, "PEM client key for "+name+" mTLS ("+env+"_KEY_FILE)")
}

// readSecrets applies the secret files given by flag.
func (c *common) readSecrets() error {
	for _, s := range []struct {
		flag, path string
		dst        *string
	}{
		{"etcd-password-file", c.etcdPasswordFile, &c.clients.EtcdPassword},
		{"redis-password-file", c.redisPasswordFile, &c.clients.RedisPassword},
		{"temporal-api-key-file", c.temporalAPIKeyFile, &c.clients.TemporalAPIKey},
	} {
		if s.path == "" {
			continue
		}
		b, err := os.ReadFile(s.path)
		if err != nil {
			return fmt.Errorf("flag -%s: %w", s.flag, err) // the path, never the content
		}
		v := strings.TrimRight(string(b), "\r\n")
		if v == "" {
			return fmt.Errorf("flag -%s: %s is empty", s.flag, s.path)
		}
		*s.dst = v
	}
	return nil
}

// refuseSecretFlags rejects a secret passed as a flag before the flag package could echo its value.
func refuseSecretFlags(args []string) error {
	for _, a := range args {
		if a == "--" {
			return nil
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if (strings.Contains(name, "password") || strings.Contains(name, "api-key")) && !strings.HasSuffix(name, "-file") {
			return fmt.Errorf("flag -%s is not accepted: a secret on the command line shows in ps; use the environment variable or -%s-file", name, name)
		}
	}
	return nil
}

// parse runs fs over args, printing the usage on -h; every other error is returned for one line.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := refuseSecretFlags(args); err != nil {
		return err
	}
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stdout)
			fmt.Fprintf(stdout, "usage: demo-worker %s [flags]\n", fs.Name())
			fs.PrintDefaults()
			return errHelp
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// parseRun reads the environment and the flags of `demo-worker run` and validates everything.
func parseRun(args []string, stdout io.Writer) (runOptions, error) {
	var o runOptions
	var err error
	if o.common, err = loadCommon(); err != nil {
		return o, err
	}
	o.httpAddr, o.shutdownTimeout, o.startTimeout, o.logLevel = defaultHTTPAddr, defaultShutdownTimeout, defaultStartTimeout, zapcore.InfoLevel
	if v, ok := os.LookupEnv(envHTTPAddr); ok {
		o.httpAddr = strings.TrimSpace(v)
	}
	if v, ok := os.LookupEnv(envLogLevel); ok {
		if err := o.logLevel.Set(strings.TrimSpace(v)); err != nil {
			return o, fmt.Errorf("%s: %w", envLogLevel, err)
		}
	}
	o.events = strings.TrimSpace(os.Getenv(envEvents))
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{envShutdownTimeout, &o.shutdownTimeout}, {envStartTimeout, &o.startTimeout}} {
		if v, ok := os.LookupEnv(d.env); ok {
			if err := (durationValue{d.dst}).Set(strings.TrimSpace(v)); err != nil {
				return o, fmt.Errorf("%s: %w", d.env, err)
			}
		}
	}

	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	o.addFlags(fs)
	c := &o.cfg
	fs.StringVar(&c.ServerID, "server-id", c.ServerID, "this process's ID in elections, heartbeats and the registry (BATON_SERVER_ID; default <host>-<pid>-<random>)")
	fs.StringVar(&c.Version, "version", c.Version, "this build's version, published to the other workers so a rolling deploy moves queues forward only (BATON_VERSION; default the build's module version, or dev)")
	fs.StringVar(&o.httpAddr, "http", o.httpAddr, "listen address of /metrics, /healthz, /readyz and /status ("+envHTTPAddr+")")
	fs.Var(durationValue{&o.shutdownTimeout}, "shutdown-timeout", "bound of the graceful stop: the Temporal workers' drain, then the Node's handover ("+envShutdownTimeout+")")
	fs.Var(durationValue{&o.startTimeout}, "start-timeout", "bound of the start ("+envStartTimeout+")")
	fs.Var(&o.logLevel, "log-level", "debug, info, warn or error ("+envLogLevel+"; default info)")
	fs.StringVar(&o.events, "events", o.events, "stdout: write Baton's typed events (package event) as JSON lines on standard output, for tools; empty: none ("+envEvents+")")
	fs.Var(durationValue{&c.Election.TTL}, "ttl", fmt.Sprintf("etcd lease TTL, whole seconds (BATON_ELECTION_TTL; default %v)", election.DefaultConfig().TTL))
	fs.Var(durationValue{&c.Heartbeat.Interval}, "heartbeat-interval", fmt.Sprintf("dispatcher heartbeat interval (BATON_HEARTBEAT_INTERVAL; default %v)", heartbeat.DefaultConfig().Interval))
	fs.Var(durationValue{&c.Reconciler.Interval}, "reconcile-interval", fmt.Sprintf("reconciler cycle (BATON_RECONCILE_INTERVAL; default %v)", reconciler.DefaultConfig().Interval))
	fs.Var(durationValue{&c.Reconciler.StaleAfter}, "stale-after", fmt.Sprintf("heartbeat age that makes a dispatcher stale (BATON_RECONCILE_STALE_AFTER; default %v)", reconciler.DefaultConfig().StaleAfter))
	fs.Var(durationValue{&c.Registry.HeartbeatInterval}, "registry-heartbeat-interval", fmt.Sprintf("worker registry heartbeat interval (BATON_REGISTRY_HEARTBEAT_INTERVAL; default %v)", registry.DefaultConfig().HeartbeatInterval))
	if err := parse(fs, args, stdout); err != nil {
		return o, err
	}
	if err := o.readSecrets(); err != nil {
		return o, err
	}
	if o.events != "" && o.events != "stdout" {
		return o, fmt.Errorf("-events (%s): must be empty or stdout, got %q", envEvents, o.events)
	}
	if o.cfg.ServerID == "" {
		// Chosen here rather than by the Node, so that the Temporal workers and the startup log use it too.
		o.cfg.ServerID = baton.DefaultServerID()
	}
	if o.cfg.Version == "" {
		o.cfg.Version = buildVersion()
	}
	if err := o.cfg.Validate(); err != nil {
		return o, err
	}
	if err := o.clients.Validate(); err != nil {
		return o, err
	}
	if _, _, err := net.SplitHostPort(o.httpAddr); err != nil {
		return o, fmt.Errorf("flag -http (%s): %w", envHTTPAddr, err)
	}
	if least := o.nodeStopBudget() + minDrain + stopSlack; o.shutdownTimeout < least {
		return o, fmt.Errorf("flag -shutdown-timeout (%s) must be at least %v: %v for the Temporal workers to drain, "+
			"%v for the Node's graceful handover (%d × the election's ResignTimeout of %v) and %v for the rest; got %v",
			envShutdownTimeout, least, minDrain, o.nodeStopBudget(), resignSteps, o.resignTimeout(), stopSlack, o.shutdownTimeout)
	}
	return o, nil
}

// resignTimeout is the election's effective ResignTimeout.
func (o runOptions) resignTimeout() time.Duration {
	if t := o.cfg.Election.ResignTimeout; t > 0 {
		return t
	}
	return election.DefaultConfig().ResignTimeout
}

// nodeStopBudget is the time the Node's stop is left: a graceful handover of every term that a
// shorter stop would cut into, leaving the queues to the lease expiry (a TTL without a leader).
func (o runOptions) nodeStopBudget() time.Duration { return resignSteps * o.resignTimeout() }

// drainTimeout is the Temporal workers' share of the stop (their WorkerStopTimeout): what is left
// of -shutdown-timeout once the Node's handover and the rest of the stop are set aside.
func (o runOptions) drainTimeout() time.Duration {
	return o.shutdownTimeout - o.nodeStopBudget() - stopSlack
}

// parseStatus reads the environment and the flags of `demo-worker status` and validates them.
func parseStatus(args []string, stdout io.Writer) (statusOptions, error) {
	var o statusOptions
	var err error
	if o.common, err = loadCommon(); err != nil {
		return o, err
	}
	o.timeout = defaultStatusTimeout
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	o.addFlags(fs)
	fs.Var(durationValue{&o.timeout}, "timeout", "bound of every call to a server")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	if err := parse(fs, args, stdout); err != nil {
		return o, err
	}
	if err := o.readSecrets(); err != nil {
		return o, err
	}
	o.queuesGiven = len(o.cfg.Queues) > 0
	check := o.cfg
	if !o.queuesGiven {
		check.Queues = []string{"placeholder"} // the queues are discovered; check everything else
	}
	if err := check.Validate(); err != nil {
		return o, err
	}
	if err := o.clients.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// listValue is a comma-separated list flag; setting it replaces the environment's list.
type listValue struct{ p *[]string }

func (l listValue) String() string {
	if l.p == nil {
		return ""
	}
	return strings.Join(*l.p, ",")
}

func (l listValue) Set(v string) error {
	*l.p = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l.p = append(*l.p, s)
		}
	}
	return nil
}

// durationValue is a positive duration flag; its zero value means the documented default.
type durationValue struct{ p *time.Duration }

func (d durationValue) String() string {
	if d.p == nil || *d.p == 0 {
		return ""
	}
	return d.p.String()
}

func (d durationValue) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("must be a duration such as 10s or 1m30s, got %q", v)
	}
	if x <= 0 {
		return fmt.Errorf("must be positive, got %v", x)
	}
	*d.p = x
	return nil
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

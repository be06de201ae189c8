package opscli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/fxmodule"
)

// Common is the configuration every operator command shares: the Baton settings and how to reach
// the servers, from the environment (baton.LoadEnv, fxmodule.LoadClientEnv), then flags.
type Common struct {
	Cfg     baton.Config
	Clients fxmodule.ClientConfig
	// secret files given by flag; read after parsing so that a flag order does not matter.
	etcdPasswordFile, redisPasswordFile, temporalAPIKeyFile string
}

// statusOptions is the configuration of `status`.
type statusOptions struct {
	Common
	timeout     time.Duration
	json        bool
	offline     bool // list the OFFLINE workers the registry still keeps
	queuesGiven bool // -queues or BATON_QUEUES; otherwise the queues are discovered
}

// ErrHelp is returned by the parsers after printing the usage for -h.
var ErrHelp = flag.ErrHelp

// LoadCommon reads the Baton settings and the clients' from the environment; ignore names the
// caller's own BATON_* variables, which baton.LoadEnv must not refuse as unknown.
func LoadCommon(ignore ...string) (Common, error) {
	var c Common
	var err error
	if c.Cfg, err = baton.LoadEnv(baton.Config{}, append(fxmodule.ClientEnvVars(), ignore...)...); err != nil {
		return c, err
	}
	if c.Clients, err = fxmodule.LoadClientEnv(fxmodule.ClientConfig{}); err != nil {
		return c, err
	}
	return c, nil
}

// AddFlags registers the flags of the project and of the connections, with the environment's values
// as defaults.
func (c *Common) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Cfg.Project, "project", c.Cfg.Project, "project the queues belong to (BATON_PROJECT)")
	fs.Var(ListValue{&c.Cfg.Queues}, "queues", "comma-separated task queues (BATON_QUEUES)")

	fs.Var(ListValue{&c.Clients.EtcdEndpoints}, "etcd-endpoints", "comma-separated etcd endpoints (BATON_ETCD_ENDPOINTS)")
	fs.StringVar(&c.Clients.EtcdUsername, "etcd-username", c.Clients.EtcdUsername, "etcd user (BATON_ETCD_USERNAME)")
	fs.StringVar(&c.etcdPasswordFile, "etcd-password-file", "", "file holding the etcd password (or BATON_ETCD_PASSWORD)")
	tlsFlags(fs, "etcd", &c.Clients.EtcdTLS)

	fs.StringVar(&c.Clients.TemporalAddress, "temporal-address", c.Clients.TemporalAddress, "Temporal frontend host:port (BATON_TEMPORAL_ADDRESS; default localhost:7233)")
	fs.StringVar(&c.Clients.TemporalNamespace, "temporal-namespace", c.Clients.TemporalNamespace, "Temporal namespace (BATON_TEMPORAL_NAMESPACE; default default)")
	fs.StringVar(&c.temporalAPIKeyFile, "temporal-api-key-file", "", "file holding the Temporal API key (or BATON_TEMPORAL_API_KEY)")
	tlsFlags(fs, "temporal", &c.Clients.TemporalTLS)
	fs.BoolVar(&c.Clients.TemporalTLSDisabled, "temporal-tls-disabled", c.Clients.TemporalTLSDisabled,
		"no TLS to Temporal even with an API key, for a TLS-terminating proxy on this host (BATON_TEMPORAL_TLS_DISABLED)")

	fs.StringVar(&c.Clients.RedisAddr, "redis-addr", c.Clients.RedisAddr, "Redis host:port (BATON_REDIS_ADDR; default localhost:6379)")
	fs.StringVar(&c.Clients.RedisUsername, "redis-username", c.Clients.RedisUsername, "Redis ACL user (BATON_REDIS_USERNAME)")
	fs.StringVar(&c.redisPasswordFile, "redis-password-file", "", "file holding the Redis password (or BATON_REDIS_PASSWORD)")
	tlsFlags(fs, "redis", &c.Clients.RedisTLS)
}

func tlsFlags(fs *flag.FlagSet, name string, t *fxmodule.TLSFiles) {
	env := "BATON_" + strings.ToUpper(name)
	fs.StringVar(&t.CAFile, name+"-ca-file", t.CAFile, "PEM file of the CAs of the "+name+" server ("+env+"_CA_FILE)")
	fs.StringVar(&t.CertFile, name+"-cert-file", t.CertFile, "PEM client certificate for "+name+" mTLS ("+env+"_CERT_FILE)")
	fs.StringVar(&t.KeyFile, name+"-key-file", t.KeyFile, "PEM client key for "+name+" mTLS ("+env+"_KEY_FILE)")
}

// ReadSecrets applies the secret files given by flag.
func (c *Common) ReadSecrets() error {
	for _, s := range []struct {
		flag, path string
		dst        *string
	}{
		{"etcd-password-file", c.etcdPasswordFile, &c.Clients.EtcdPassword},
		{"redis-password-file", c.redisPasswordFile, &c.Clients.RedisPassword},
		{"temporal-api-key-file", c.temporalAPIKeyFile, &c.Clients.TemporalAPIKey},
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

// Parse runs fs over args, printing the usage on -h; every other error is returned for one line.
// No argument may follow the flags.
func Parse(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := parseFlags(fs, args, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// parseFlags runs fs over args, refusing a secret given as a flag and printing the usage on -h
// (ErrHelp).
func parseFlags(fs *flag.FlagSet, args []string, stdout io.Writer) error {
	if err := refuseSecretFlags(args); err != nil {
		return err
	}
	fs.SetOutput(io.Discard)
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		usage := fs.Name() // a command that takes an argument names its flags' place itself
		if !strings.Contains(usage, "[flags]") {
			usage += " [flags]"
		}
		fmt.Fprintf(stdout, "usage: %s\n", usage)
		fs.PrintDefaults()
		return ErrHelp
	}
	return err
}

// parseStatus reads the environment and the flags of `prog status` and validates them.
func parseStatus(prog string, args []string, stdout io.Writer, ignore []string) (statusOptions, error) {
	var o statusOptions
	var err error
	if o.Common, err = LoadCommon(ignore...); err != nil {
		return o, err
	}
	o.timeout = DefaultStatusTimeout
	fs := flag.NewFlagSet(prog+" status", flag.ContinueOnError)
	o.AddFlags(fs)
	fs.Var(DurationValue{&o.timeout}, "timeout", "bound of every call to a server")
	fs.BoolVar(&o.json, "json", false, "print JSON instead of a table")
	fs.BoolVar(&o.offline, "offline", false,
		"also list the OFFLINE workers the registry still keeps: those that left cleanly and those evicted")
	if err := Parse(fs, args, stdout); err != nil {
		return o, err
	}
	if err := o.ReadSecrets(); err != nil {
		return o, err
	}
	o.queuesGiven = len(o.Cfg.Queues) > 0
	check := o.Cfg
	if !o.queuesGiven {
		check.Queues = []string{"placeholder"} // the queues are discovered; check everything else
	}
	if err := check.Validate(); err != nil {
		return o, err
	}
	if err := o.Clients.Validate(); err != nil {
		return o, err
	}
	return o, nil
}

// ListValue is a comma-separated list flag; setting it replaces the environment's list.
type ListValue struct{ P *[]string }

func (l ListValue) String() string {
	if l.P == nil {
		return ""
	}
	return strings.Join(*l.P, ",")
}

func (l ListValue) Set(v string) error {
	*l.P = nil
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l.P = append(*l.P, s)
		}
	}
	return nil
}

// DurationValue is a positive duration flag; its zero value means the documented default.
type DurationValue struct{ P *time.Duration }

func (d DurationValue) String() string {
	if d.P == nil || *d.P == 0 {
		return ""
	}
	return d.P.String()
}

func (d DurationValue) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("must be a duration such as 10s or 1m30s, got %q", v)
	}
	if x <= 0 {
		return fmt.Errorf("must be positive, got %v", x)
	}
	*d.P = x
	return nil
}

// Exit codes of the operator commands.
const (
	ExitOK      = 0
	ExitUnclean = 1 // the command ran and found something wrong, or could not read what it needs
	ExitConfig  = 2 // invalid configuration or usage: the message names the field, flag or variable
)

// DefaultStatusTimeout bounds each call of status to a server.
const DefaultStatusTimeout = 5 * time.Second

// Duration is a DurationValue flag over p.
func Duration(p *time.Duration) DurationValue { return DurationValue{P: p} }

// List is a ListValue flag over p.
func List(p *[]string) ListValue { return ListValue{P: p} }

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
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/configerr"
	"github.com/baton-run/baton/names"
)

// Common is the configuration every operator command shares: the Baton settings and how to reach
// the servers, from the environment (baton.LoadEnv, clients.LoadEnv), then flags.
type Common struct {
	Cfg     baton.Config
	Clients clients.Config
	// secret files given by flag; read after parsing so that a flag order does not matter.
	etcdPasswordFile, redisPasswordFile, temporalAPIKeyFile string
	// settings names the flag and the variable of each configuration field a flag sets (bind), by the
	// field's path, so that an error about the field names both (Explain).
	settings map[string]setting
}

// setting is how the command line sets a configuration field: a flag, and the environment variable
// the flag's default comes from.
type setting struct{ flag, env string }

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
	if c.Cfg, err = baton.LoadEnv(baton.Config{}, append(clients.EnvVars(), ignore...)...); err != nil {
		return c, err
	}
	if c.Clients, err = clients.LoadEnv(clients.Config{}); err != nil {
		return c, err
	}
	return c, nil
}

// AddFlags registers the flags of the project and of the connections, with the environment's values
// as defaults.
func (c *Common) AddFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Cfg.Project, "project", c.Cfg.Project, "project the queues belong to "+c.bind("Project", "project", envOf("Project")))
	fs.Var(ListValue{&c.Cfg.Queues}, "queues", "comma-separated task queues "+c.bind("Queues", "queues", envOf("Queues")))

	fs.Var(ListValue{&c.Clients.EtcdEndpoints}, "etcd-endpoints", "comma-separated etcd endpoints "+c.bind("EtcdEndpoints", "etcd-endpoints", "BATON_ETCD_ENDPOINTS"))
	fs.StringVar(&c.Clients.EtcdUsername, "etcd-username", c.Clients.EtcdUsername, "etcd user "+c.bind("EtcdUsername", "etcd-username", "BATON_ETCD_USERNAME"))
	fs.StringVar(&c.etcdPasswordFile, "etcd-password-file", "", "file holding the etcd password (or "+c.bindEnv("EtcdPassword", "etcd-password-file", "BATON_ETCD_PASSWORD")+")")
	c.tlsFlags(fs, "etcd", &c.Clients.EtcdTLS)

	fs.StringVar(&c.Clients.TemporalAddress, "temporal-address", c.Clients.TemporalAddress,
		"Temporal frontend host:port ("+c.bindEnv("TemporalAddress", "temporal-address", "BATON_TEMPORAL_ADDRESS")+"; default "+clients.DefaultTemporalAddress+")")
	fs.StringVar(&c.Clients.TemporalNamespace, "temporal-namespace", c.Clients.TemporalNamespace,
		"Temporal namespace ("+c.bindEnv("TemporalNamespace", "temporal-namespace", "BATON_TEMPORAL_NAMESPACE")+"; default "+clients.DefaultTemporalNamespace+")")
	fs.StringVar(&c.temporalAPIKeyFile, "temporal-api-key-file", "", "file holding the Temporal API key (or "+c.bindEnv("TemporalAPIKey", "temporal-api-key-file", "BATON_TEMPORAL_API_KEY")+")")
	c.tlsFlags(fs, "temporal", &c.Clients.TemporalTLS)
	fs.BoolVar(&c.Clients.TemporalTLSDisabled, "temporal-tls-disabled", c.Clients.TemporalTLSDisabled,
		"no TLS to Temporal even with an API key, for a TLS-terminating proxy on this host "+c.bind("TemporalTLSDisabled", "temporal-tls-disabled", "BATON_TEMPORAL_TLS_DISABLED"))

	fs.StringVar(&c.Clients.RedisAddr, "redis-addr", c.Clients.RedisAddr, "Redis host:port ("+c.bindEnv("RedisAddr", "redis-addr", "BATON_REDIS_ADDR")+"; default "+clients.DefaultRedisAddr+")")
	fs.StringVar(&c.Clients.RedisUsername, "redis-username", c.Clients.RedisUsername, "Redis ACL user "+c.bind("RedisUsername", "redis-username", "BATON_REDIS_USERNAME"))
	fs.StringVar(&c.redisPasswordFile, "redis-password-file", "", "file holding the Redis password (or "+c.bindEnv("RedisPassword", "redis-password-file", "BATON_REDIS_PASSWORD")+")")
	c.tlsFlags(fs, "redis", &c.Clients.RedisTLS)
}

// bind records that flag sets the configuration field field, as the environment variable env does,
// and returns "(env)" for the flag's usage.
func (c *Common) bind(field, flag, env string) string { return "(" + c.bindEnv(field, flag, env) + ")" }

// bindEnv is bind returning env alone.
func (c *Common) bindEnv(field, flag, env string) string {
	if c.settings == nil {
		c.settings = map[string]setting{}
	}
	c.settings[field] = setting{flag: "-" + flag, env: env}
	return env
}

// envOf returns the BATON_* variable that sets field, a path of baton.Config ("Reconciler.Interval"),
// from the one list baton.EnvVars holds. It panics on a field no variable sets: a help text naming a
// variable that does not exist is a bug every command's -h test finds.
func envOf(field string) string {
	for _, v := range baton.EnvVars() {
		if v[1] == field {
			return v[0]
		}
	}
	panic("opscli: no BATON_* variable sets Config." + field)
}

// Explain restates a configuration error (a *configerr.Error, from baton.Config.Validate or
// clients.Config.Validate) in the words of the command line: the flag and the variable that
// set the field it names, then the rule, for example "-etcd-endpoints (BATON_ETCD_ENDPOINTS) must
// name at least one endpoint". A field no flag sets is named by its variable (baton.EnvVars). The
// error still matches the original with errors.Is and errors.As.
func (c *Common) Explain(err error) error {
	var bad *configerr.Error
	if !errors.As(err, &bad) {
		return err
	}
	field, index, _ := strings.Cut(bad.Field, "[")
	if index != "" {
		index = " [" + index
	}
	if s, ok := c.settings[field]; ok {
		return &flagError{name: s.flag + " (" + s.env + ")" + index, rule: bad.Rule, err: err}
	}
	for _, v := range baton.EnvVars() {
		if v[1] == field {
			return &flagError{name: v[0] + " (" + bad.Field + ")", rule: bad.Rule, err: err}
		}
	}
	return err
}

// checkNames checks the project and the queues with the rule Baton applies to every name, and
// says which flag and variable set a bad one: "-project (BATON_PROJECT) must not be empty".
func (c *Common) checkNames() error {
	bad := func(field, value string, err error) error {
		name := envOf(field)
		if s, ok := c.settings[field]; ok {
			name = s.flag + " (" + s.env + ")"
		}
		rule := err.Error()
		if value != "" {
			rule += ", got " + names.Quote(value)
		}
		return &flagError{name: name, rule: rule,
			err: configerr.New(baton.ErrInvalidConfig, field, "%s %v", names.Quote(value), err)}
	}
	if err := names.Check(c.Cfg.Project); err != nil {
		return bad("Project", c.Cfg.Project, err)
	}
	for _, q := range c.Cfg.Queues {
		if err := names.Check(q); err != nil {
			return bad("Queues", q, err)
		}
	}
	return nil
}

// flagError is a configuration error told by the flag and the variable that set the field.
type flagError struct {
	name, rule string
	err        error
}

func (e *flagError) Error() string { return e.name + " " + e.rule }
func (e *flagError) Unwrap() error { return e.err }

func (c *Common) tlsFlags(fs *flag.FlagSet, name string, t *clients.TLSFiles) {
	env := "BATON_" + strings.ToUpper(name)
	field := strings.ToUpper(name[:1]) + name[1:] + "TLS" // EtcdTLS, TemporalTLS, RedisTLS
	c.bindEnv(field, name+"-ca-file, -"+name+"-cert-file, -"+name+"-key-file", env+"_CA_FILE, "+env+"_CERT_FILE, "+env+"_KEY_FILE")
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
		// -*-file and -*-env flags name where a secret is, never the secret.
		if (strings.Contains(name, "password") || strings.Contains(name, "api-key")) && !strings.HasSuffix(name, "-file") && !strings.HasSuffix(name, "-env") {
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
	return o, o.validate()
}

// validate checks the configuration of a command that reads the project's queues (discovered when
// none are given) and says which flag and variable to change.
func (c *Common) validate() error {
	if err := c.checkNames(); err != nil {
		return err
	}
	check := c.Cfg
	if len(check.Queues) == 0 {
		check.Queues = []string{"placeholder"} // the queues are discovered; check everything else
	}
	if err := check.Validate(); err != nil {
		return c.Explain(err)
	}
	return c.Explain(c.Clients.Validate())
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

package fxmodule

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/configerr"
)

// ErrInvalidClientConfig wraps every client configuration error; the message names the field (and
// the environment variable) and the rule.
var ErrInvalidClientConfig = errors.New("fxmodule: invalid client config")

// TLSFiles names PEM files for a TLS connection. With none set, the connection is plain; with CAFile
// alone, the server is verified against it; with CertFile and KeyFile, the client also authenticates.
type TLSFiles struct {
	Enabled    bool   // TLS with the system roots when no CAFile is given
	CAFile     string // PEM bundle of the CAs that sign the server's certificate
	CertFile   string // client certificate (mTLS)
	KeyFile    string // client key (mTLS)
	ServerName string // overrides the name checked in the server's certificate
}

// set reports whether any TLS setting is given, which turns TLS on.
func (t TLSFiles) set() bool {
	return t.Enabled || t.CAFile != "" || t.CertFile != "" || t.KeyFile != ""
}

func (t TLSFiles) config() (*tls.Config, error) {
	if !t.set() {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("CA file %s holds no PEM certificate", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("client certificate and key must be given together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// ClientConfig describes how to reach etcd, Temporal and Redis, for applications that have no clients
// of their own. Secrets (passwords, API keys) are tagged json:"-", and String, GoString and Format
// print them as [redacted], so a ClientConfig can be logged or formatted with any verb.
type ClientConfig struct {
	// EtcdEndpoints are URLs (https:// with EtcdTLS) or host:port. Required.
	EtcdEndpoints []string
	// EtcdUsername and EtcdPassword authenticate to etcd; etcd's client sends no credentials unless
	// both are set. Without them, with client-certificate auth, etcd takes the certificate's common
	// name as the user.
	EtcdUsername    string
	EtcdPassword    string `json:"-"`
	EtcdTLS         TLSFiles
	EtcdDialTimeout time.Duration // default 5s

	TemporalAddress   string // host:port; default "localhost:7233"
	TemporalNamespace string // default "default"
	// TemporalAPIKey is sent as a bearer token with every call; it turns TLS on (system roots) unless
	// TemporalTLS says otherwise or TemporalTLSDisabled is set.
	TemporalAPIKey string `json:"-"`
	TemporalTLS    TLSFiles
	// TemporalTLSDisabled connects without TLS even with an API key: only for a TLS-terminating proxy
	// on the same host (a service-mesh sidecar). Refused together with TemporalTLS settings.
	TemporalTLSDisabled bool

	RedisAddr string // host:port of one server; default "localhost:6379" (unless RedisClusterAddrs)
	// RedisClusterAddrs are host:port seed nodes of a Redis Cluster; the client learns every master
	// and replica from them (a few, not all, are enough). Refused together with RedisAddr, and with a
	// RedisDB other than 0 (a cluster has database 0 only).
	RedisClusterAddrs []string
	RedisUsername     string
	RedisPassword     string `json:"-"`
	RedisDB           int
	RedisTLS          TLSFiles
}

// clientEnv lists the environment variables of a ClientConfig.
var clientEnv = []struct {
	name string
	set  func(c *ClientConfig, v string) error
}{
	{"BATON_ETCD_ENDPOINTS", func(c *ClientConfig, v string) error { c.EtcdEndpoints = split(v); return nil }},
	{"BATON_ETCD_USERNAME", func(c *ClientConfig, v string) error { c.EtcdUsername = v; return nil }},
	{"BATON_ETCD_PASSWORD", func(c *ClientConfig, v string) error { c.EtcdPassword = v; return nil }},
	{"BATON_ETCD_TLS", boolEnv(func(c *ClientConfig) *bool { return &c.EtcdTLS.Enabled })},
	{"BATON_ETCD_CA_FILE", func(c *ClientConfig, v string) error { c.EtcdTLS.CAFile = v; return nil }},
	{"BATON_ETCD_CERT_FILE", func(c *ClientConfig, v string) error { c.EtcdTLS.CertFile = v; return nil }},
	{"BATON_ETCD_KEY_FILE", func(c *ClientConfig, v string) error { c.EtcdTLS.KeyFile = v; return nil }},
	{"BATON_ETCD_SERVER_NAME", func(c *ClientConfig, v string) error { c.EtcdTLS.ServerName = v; return nil }},
	{"BATON_ETCD_DIAL_TIMEOUT", func(c *ClientConfig, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("must be a positive duration such as 5s, got %q", v)
		}
		c.EtcdDialTimeout = d
		return nil
	}},
	{"BATON_TEMPORAL_ADDRESS", func(c *ClientConfig, v string) error { c.TemporalAddress = v; return nil }},
	{"BATON_TEMPORAL_NAMESPACE", func(c *ClientConfig, v string) error { c.TemporalNamespace = v; return nil }},
	{"BATON_TEMPORAL_API_KEY", func(c *ClientConfig, v string) error { c.TemporalAPIKey = v; return nil }},
	{"BATON_TEMPORAL_TLS", boolEnv(func(c *ClientConfig) *bool { return &c.TemporalTLS.Enabled })},
	{"BATON_TEMPORAL_TLS_DISABLED", boolEnv(func(c *ClientConfig) *bool { return &c.TemporalTLSDisabled })},
	{"BATON_TEMPORAL_CA_FILE", func(c *ClientConfig, v string) error { c.TemporalTLS.CAFile = v; return nil }},
	{"BATON_TEMPORAL_CERT_FILE", func(c *ClientConfig, v string) error { c.TemporalTLS.CertFile = v; return nil }},
	{"BATON_TEMPORAL_KEY_FILE", func(c *ClientConfig, v string) error { c.TemporalTLS.KeyFile = v; return nil }},
	{"BATON_TEMPORAL_SERVER_NAME", func(c *ClientConfig, v string) error { c.TemporalTLS.ServerName = v; return nil }},
	{"BATON_REDIS_ADDR", func(c *ClientConfig, v string) error { c.RedisAddr = v; return nil }},
	{"BATON_REDIS_CLUSTER_ADDRS", func(c *ClientConfig, v string) error { c.RedisClusterAddrs = split(v); return nil }},
	{"BATON_REDIS_USERNAME", func(c *ClientConfig, v string) error { c.RedisUsername = v; return nil }},
	{"BATON_REDIS_PASSWORD", func(c *ClientConfig, v string) error { c.RedisPassword = v; return nil }},
	{"BATON_REDIS_DB", func(c *ClientConfig, v string) error {
		db, err := strconv.Atoi(v)
		if err != nil || db < 0 {
			return fmt.Errorf("must be a non-negative integer, got %q", v)
		}
		c.RedisDB = db
		return nil
	}},
	{"BATON_REDIS_TLS", boolEnv(func(c *ClientConfig) *bool { return &c.RedisTLS.Enabled })},
	{"BATON_REDIS_CA_FILE", func(c *ClientConfig, v string) error { c.RedisTLS.CAFile = v; return nil }},
	{"BATON_REDIS_CERT_FILE", func(c *ClientConfig, v string) error { c.RedisTLS.CertFile = v; return nil }},
	{"BATON_REDIS_KEY_FILE", func(c *ClientConfig, v string) error { c.RedisTLS.KeyFile = v; return nil }},
	{"BATON_REDIS_SERVER_NAME", func(c *ClientConfig, v string) error { c.RedisTLS.ServerName = v; return nil }},
}

// ClientEnvVars lists the environment variables LoadClientEnv reads.
func ClientEnvVars() []string {
	out := make([]string, len(clientEnv))
	for i, e := range clientEnv {
		out[i] = e.name
	}
	return out
}

// LoadClientEnv applies the BATON_ETCD_*, BATON_TEMPORAL_* and BATON_REDIS_* variables to base. An
// error wraps ErrInvalidClientConfig and names the variable; it never holds a secret's value.
// Unknown variables in those namespaces are refused, so a typo does not leave a default in force
// (baton.LoadEnv leaves the namespaces to this function), except the names of a Kubernetes service
// link's shape (baton.IsServiceLinkEnv: a Service named baton-etcd injects BATON_ETCD_SERVICE_HOST,
// BATON_ETCD_PORT, ...), which are ignored; baton.ServiceLinkEnv lists them for the caller to log.
// The variables (ClientEnvVars lists them):
//
//   - etcd: BATON_ETCD_ENDPOINTS (comma-separated), BATON_ETCD_DIAL_TIMEOUT; credentials
//     BATON_ETCD_USERNAME and BATON_ETCD_PASSWORD; TLS BATON_ETCD_TLS, BATON_ETCD_CA_FILE,
//     BATON_ETCD_CERT_FILE, BATON_ETCD_KEY_FILE, BATON_ETCD_SERVER_NAME.
//   - Temporal: BATON_TEMPORAL_ADDRESS, BATON_TEMPORAL_NAMESPACE; credentials
//     BATON_TEMPORAL_API_KEY (Temporal Cloud) or a client certificate; TLS BATON_TEMPORAL_TLS,
//     BATON_TEMPORAL_TLS_DISABLED, BATON_TEMPORAL_CA_FILE, BATON_TEMPORAL_CERT_FILE,
//     BATON_TEMPORAL_KEY_FILE, BATON_TEMPORAL_SERVER_NAME.
//   - Redis: BATON_REDIS_ADDR, or BATON_REDIS_CLUSTER_ADDRS (a Redis Cluster's seed nodes,
//     comma-separated); BATON_REDIS_DB; credentials BATON_REDIS_USERNAME (an ACL user) and
//     BATON_REDIS_PASSWORD; TLS BATON_REDIS_TLS, BATON_REDIS_CA_FILE, BATON_REDIS_CERT_FILE,
//     BATON_REDIS_KEY_FILE, BATON_REDIS_SERVER_NAME.
func LoadClientEnv(base ClientConfig) (ClientConfig, error) {
	if err := unknownClientEnv(os.Environ()); err != nil {
		return base, err
	}
	return loadClientEnv(base, os.LookupEnv)
}

func unknownClientEnv(environ []string) error {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(baton.ClientEnvPrefixes(), func(p string) bool { return strings.HasPrefix(name, p) }) ||
			slices.Contains(ClientEnvVars(), name) || baton.IsServiceLinkEnv(name) {
			continue
		}
		return fmt.Errorf("%w: %q is not a client setting (see fxmodule.ClientEnvVars)", ErrInvalidClientConfig, name)
	}
	return nil
}

func loadClientEnv(base ClientConfig, lookup func(string) (string, bool)) (ClientConfig, error) {
	for _, e := range clientEnv {
		v, ok := lookup(e.name)
		if !ok {
			continue
		}
		if err := e.set(&base, strings.TrimSpace(v)); err != nil {
			// The value is never echoed for a secret.
			return base, configerr.New(ErrInvalidClientConfig, e.name, "%v", err)
		}
	}
	return base, nil
}

func split(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func boolEnv(field func(*ClientConfig) *bool) func(*ClientConfig, string) error {
	return func(c *ClientConfig, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("must be true or false, got %q", v)
		}
		*field(c) = b
		return nil
	}
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.EtcdDialTimeout == 0 {
		c.EtcdDialTimeout = 5 * time.Second
	}
	if c.TemporalAddress == "" {
		c.TemporalAddress = "localhost:7233"
	}
	if c.TemporalNamespace == "" {
		c.TemporalNamespace = "default"
	}
	if c.RedisAddr == "" && len(c.RedisClusterAddrs) == 0 {
		c.RedisAddr = "localhost:6379"
	}
	return c
}

// Validate checks the configuration after defaults are applied.
func (c ClientConfig) Validate() error {
	c = c.withDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidClientConfig, field, format, args...)
	}
	if len(c.RedisClusterAddrs) > 0 {
		switch {
		case c.RedisAddr != "":
			return bad("RedisAddr", "must not be set with RedisClusterAddrs (BATON_REDIS_ADDR, BATON_REDIS_CLUSTER_ADDRS): one names a single server, the other a cluster's seed nodes")
		case c.RedisDB != 0:
			return bad("RedisDB", "must be 0 with RedisClusterAddrs: a Redis Cluster has database 0 only, got %d", c.RedisDB)
		}
		for i, a := range c.RedisClusterAddrs {
			if !strings.Contains(a, ":") {
				return bad(fmt.Sprintf("RedisClusterAddrs[%d]", i), "must be host:port, got %q", a)
			}
		}
	}
	switch {
	case len(c.EtcdEndpoints) == 0:
		return bad("EtcdEndpoints", "must name at least one endpoint (BATON_ETCD_ENDPOINTS)")
	case c.EtcdPassword != "" && c.EtcdUsername == "":
		return bad("EtcdUsername", "must be set with EtcdPassword")
	case c.EtcdUsername != "" && c.EtcdPassword == "":
		return bad("EtcdPassword", "must be set with EtcdUsername: etcd's client sends no credentials without a password (BATON_ETCD_PASSWORD)")
	case c.TemporalTLSDisabled && c.TemporalTLS.set():
		return bad("TemporalTLSDisabled", "must not be set with TemporalTLS")
	case !strings.Contains(c.TemporalAddress, ":"):
		return bad("TemporalAddress", "must be host:port, got %q", c.TemporalAddress)
	case len(c.RedisClusterAddrs) == 0 && !strings.Contains(c.RedisAddr, ":"):
		return bad("RedisAddr", "must be host:port, got %q", c.RedisAddr)
	}
	if c.EtcdTLS.set() {
		for i, ep := range c.EtcdEndpoints {
			// etcd's client silently drops the TLS settings for these schemes and connects in plain text.
			if scheme, _, ok := strings.Cut(ep, "://"); ok && (scheme == "http" || scheme == "unix") {
				return bad(fmt.Sprintf("EtcdEndpoints[%d]", i), "is %q, a plain-text endpoint, while EtcdTLS is set: use https:// (or unixs://)", ep)
			}
		}
	}
	for _, t := range []struct {
		field string
		tls   TLSFiles
	}{{"EtcdTLS", c.EtcdTLS}, {"TemporalTLS", c.TemporalTLS}, {"RedisTLS", c.RedisTLS}} {
		if _, err := t.tls.config(); err != nil {
			return bad(t.field, "%v", err)
		}
	}
	return nil
}

// ClientParams are what the client providers consume.
type ClientParams struct {
	fx.In
	Config ClientConfig
	Logger *zap.Logger `optional:"true"`
	// DataConverter, when the app provides one, is the Temporal client's data converter (NodeParams
	// gives Baton the same one).
	DataConverter converter.DataConverter `optional:"true"`
	Lifecycle     fx.Lifecycle
}

// NewEtcdClient builds an etcd client from the ClientConfig and closes it when the app stops. With
// TLS, it first makes one TLS connection to the endpoints itself: etcd's client reports a server
// that refuses its certificate (or a certificate it cannot verify) only as "context deadline
// exceeded", so such a refusal fails here with its reason. An unreachable etcd does not fail here
// unless credentials are set (etcd's client authenticates at once).
func NewEtcdClient(p ClientParams) (*clientv3.Client, error) {
	if err := p.Config.Validate(); err != nil {
		return nil, err
	}
	c := p.Config.withDefaults()
	tlsCfg, _ := c.EtcdTLS.config()
	if tlsCfg != nil {
		if err := probeTLS(c.EtcdEndpoints, tlsCfg, min(c.EtcdDialTimeout, maxProbeTimeout)); err != nil {
			return nil, fmt.Errorf("fxmodule: etcd client for %v: %w", c.EtcdEndpoints, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints: c.EtcdEndpoints, DialTimeout: c.EtcdDialTimeout, TLS: tlsCfg,
		Username: c.EtcdUsername, Password: c.EtcdPassword,
		// The client's own retry warnings repeat, request by request, what Baton reports once with
		// its consequence (a campaign failing, readiness red): only its errors are kept.
		Logger:            logger(p.Logger).Named("etcd-client").WithOptions(zap.IncreaseLevel(zapcore.ErrorLevel)),
		DialKeepAliveTime: 10 * time.Second, DialKeepAliveTimeout: 3 * time.Second,
	})
	if errors.Is(err, context.DeadlineExceeded) {
		// With credentials the client authenticates at once: an etcd that does not answer ends here.
		return nil, fmt.Errorf("fxmodule: etcd not reachable at %v within %v (BATON_ETCD_ENDPOINTS, BATON_ETCD_DIAL_TIMEOUT): %w",
			c.EtcdEndpoints, c.EtcdDialTimeout, err)
	}
	if err != nil {
		return nil, fmt.Errorf("fxmodule: etcd client for %v: %w", c.EtcdEndpoints, err)
	}
	p.Lifecycle.Append(fx.StopHook(cli.Close))
	return cli, nil
}

// NewTemporalClient connects a Temporal client (lazily: an unreachable server does not fail the start,
// the takeover retries) with the app's data converter when it provides one, and closes it when the
// app stops.
func NewTemporalClient(p ClientParams) (client.Client, error) {
	opts, err := temporalOptions(p.Config, p.Logger)
	if err != nil {
		return nil, err
	}
	opts.DataConverter = p.DataConverter
	tc, err := client.NewLazyClient(opts)
	if err != nil {
		return nil, fmt.Errorf("fxmodule: Temporal client for %s: %w", opts.HostPort, err)
	}
	p.Lifecycle.Append(fx.StopHook(tc.Close))
	return tc, nil
}

// temporalOptions are the SDK options NewTemporalClient dials with.
func temporalOptions(cfg ClientConfig, log *zap.Logger) (client.Options, error) {
	if err := cfg.Validate(); err != nil {
		return client.Options{}, err
	}
	c := cfg.withDefaults()
	tlsCfg, _ := c.TemporalTLS.config()
	opts := client.Options{HostPort: c.TemporalAddress, Namespace: c.TemporalNamespace,
		ConnectionOptions: client.ConnectionOptions{TLS: tlsCfg, TLSDisabled: c.TemporalTLSDisabled, DialOptions: TemporalDialOptions()},
		Logger:            sdkLogger{logger(log).Named("temporal-client").Sugar()}}
	if c.TemporalAPIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.TemporalAPIKey)
		if tlsCfg == nil && !c.TemporalTLSDisabled {
			opts.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	return opts, nil
}

// NewRedisClient builds a Redis client, of a Redis Cluster with RedisClusterAddrs, and closes it when
// the app stops. When the app starts, it pings Redis once: a refusal of the credentials or of the TLS
// connection fails the start with its reason (retrying cannot fix either); an unreachable Redis only
// logs a warning, the loops retry.
func NewRedisClient(p ClientParams) (redis.UniversalClient, error) {
	if err := p.Config.Validate(); err != nil {
		return nil, err
	}
	c := p.Config.withDefaults()
	tlsCfg, _ := c.RedisTLS.config()
	var rdb redis.UniversalClient
	if len(c.RedisClusterAddrs) > 0 {
		rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.RedisClusterAddrs, Username: c.RedisUsername,
			Password: c.RedisPassword, TLSConfig: tlsCfg, DisableIdentity: true})
	} else {
		rdb = redis.NewClient(&redis.Options{Addr: c.RedisAddr, Username: c.RedisUsername, Password: c.RedisPassword,
			DB: c.RedisDB, TLSConfig: tlsCfg, DisableIdentity: true})
	}
	log := logger(p.Logger).Named("redis-client")
	p.Lifecycle.Append(fx.Hook{
		OnStart: func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, maxProbeTimeout)
			defer cancel()
			err := checkRedis(ctx, rdb, c)
			switch {
			case err == nil:
				return nil
			case errors.Is(err, errRefused):
				_ = rdb.Close() // Fx does not stop a hook whose start failed
				return err
			}
			log.Warn("Redis not reachable at start; retrying in the background", zap.String("addr", c.redisTarget()), zap.Error(err))
			return nil
		},
		OnStop: func(context.Context) error { return rdb.Close() },
	})
	return rdb, nil
}

// maxProbeTimeout bounds the connection checks NewEtcdClient and NewRedisClient make.
const maxProbeTimeout = 3 * time.Second

// errRefused marks a check that failed because the server refused the client's credentials or TLS
// settings, as opposed to a server that could not be reached.
var errRefused = errors.New("refused")

// checkRedis pings rdb; an authentication or TLS refusal returns an error wrapping errRefused.
func checkRedis(ctx context.Context, rdb redis.UniversalClient, c ClientConfig) error {
	err := rdb.Ping(ctx).Err()
	switch {
	case err == nil:
		return nil
	case redis.IsAuthError(err):
		user := c.RedisUsername
		if user == "" {
			user = "default"
		}
		return fmt.Errorf("fxmodule: Redis at %s %w authentication as user %q: %w", c.redisTarget(), errRefused, user, err)
	case redis.IsPermissionError(err):
		return fmt.Errorf("fxmodule: Redis at %s %w PING for user %q (ACL permissions): %w", c.redisTarget(), errRefused, c.RedisUsername, err)
	case tlsRefusal(err):
		return fmt.Errorf("fxmodule: Redis at %s %w the TLS connection: %w", c.redisTarget(), errRefused, err)
	}
	return fmt.Errorf("fxmodule: Redis at %s: %w", c.redisTarget(), err)
}

// redisTarget names the Redis server, or the cluster's seed nodes, in messages.
func (c ClientConfig) redisTarget() string {
	if len(c.RedisClusterAddrs) > 0 {
		return "cluster " + strings.Join(c.RedisClusterAddrs, ",")
	}
	return c.RedisAddr
}

// Clients provides the etcd, Temporal and Redis clients from a ClientConfig the app supplies, for
// applications that have none of their own.
var Clients = fx.Module("baton-clients",
	fx.Provide(NewEtcdClient, NewTemporalClient, NewRedisClient),
)

// String prints the configuration with every secret replaced by [redacted] (empty ones stay empty).
func (c ClientConfig) String() string {
	type plain ClientConfig // without methods, so that Sprintf does not recurse
	return fmt.Sprintf("%+v", plain(c.redacted()))
}

// GoString is String for %#v.
func (c ClientConfig) GoString() string { return "fxmodule.ClientConfig" + c.String() }

// Format prints String (GoString for %#v) whatever the verb: without it, verbs such as %d would
// print the fields, secrets included.
func (c ClientConfig) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, c.GoString())
		return
	}
	_, _ = io.WriteString(f, c.String())
}

func (c ClientConfig) redacted() ClientConfig {
	for _, s := range []*string{&c.EtcdPassword, &c.TemporalAPIKey, &c.RedisPassword} {
		if *s != "" {
			*s = "[redacted]"
		}
	}
	return c
}

func logger(l *zap.Logger) *zap.Logger {
	if l == nil {
		return zap.NewNop()
	}
	return l
}

// sdkLogger adapts zap to the Temporal SDK's logger.
type sdkLogger struct{ l *zap.SugaredLogger }

func (z sdkLogger) Debug(msg string, kv ...any) { z.l.Debugw(msg, kv...) }
func (z sdkLogger) Info(msg string, kv ...any)  { z.l.Infow(msg, kv...) }
func (z sdkLogger) Warn(msg string, kv ...any)  { z.l.Warnw(msg, kv...) }
func (z sdkLogger) Error(msg string, kv ...any) { z.l.Errorw(msg, kv...) }

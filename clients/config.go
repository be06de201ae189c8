package clients

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/baton-run/baton/configerr"
)

// ErrInvalidConfig wraps every client configuration error; the message names the field (and the
// environment variable) and the rule.
var ErrInvalidConfig = errors.New("clients: invalid config")

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

// Config describes how to reach etcd, Temporal and Redis. Secrets (passwords, API keys) are tagged
// json:"-", and String, GoString and Format print them as [redacted], so a Config can be logged or
// formatted with any verb.
type Config struct {
	// EtcdEndpoints are URLs (https:// with EtcdTLS) or host:port. Required.
	EtcdEndpoints []string
	// EtcdUsername and EtcdPassword authenticate to etcd; etcd's client sends no credentials unless
	// both are set. Without them, with client-certificate auth, etcd takes the certificate's common
	// name as the user.
	EtcdUsername    string
	EtcdPassword    string `json:"-"`
	EtcdTLS         TLSFiles
	EtcdDialTimeout time.Duration // default DefaultEtcdDialTimeout

	TemporalAddress   string // host:port; default DefaultTemporalAddress
	TemporalNamespace string // default DefaultTemporalNamespace
	// TemporalAPIKey is sent as a bearer token with every call; it turns TLS on (system roots) unless
	// TemporalTLS says otherwise or TemporalTLSDisabled is set.
	TemporalAPIKey string `json:"-"`
	TemporalTLS    TLSFiles
	// TemporalTLSDisabled connects without TLS even with an API key: only for a TLS-terminating proxy
	// on the same host (a service-mesh sidecar). Refused together with TemporalTLS settings.
	TemporalTLSDisabled bool

	RedisAddr string // host:port of one server; default DefaultRedisAddr (unless RedisClusterAddrs)
	// RedisClusterAddrs are host:port seed nodes of a Redis Cluster; the client learns every master
	// and replica from them (a few, not all, are enough). Refused together with RedisAddr, and with a
	// RedisDB other than 0 (a cluster has database 0 only).
	RedisClusterAddrs []string
	RedisUsername     string
	RedisPassword     string `json:"-"`
	RedisDB           int
	RedisTLS          TLSFiles
}

// The defaults of a Config's unset fields.
const (
	DefaultEtcdDialTimeout   = 5 * time.Second
	DefaultTemporalAddress   = "localhost:7233"
	DefaultTemporalNamespace = "default"
	DefaultRedisAddr         = "localhost:6379" // when RedisClusterAddrs is empty too
)

func (c Config) withDefaults() Config {
	if c.EtcdDialTimeout == 0 {
		c.EtcdDialTimeout = DefaultEtcdDialTimeout
	}
	if c.TemporalAddress == "" {
		c.TemporalAddress = DefaultTemporalAddress
	}
	if c.TemporalNamespace == "" {
		c.TemporalNamespace = DefaultTemporalNamespace
	}
	if c.RedisAddr == "" && len(c.RedisClusterAddrs) == 0 {
		c.RedisAddr = DefaultRedisAddr
	}
	return c
}

// Validate checks the configuration after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	bad := func(field, format string, args ...any) error {
		return configerr.New(ErrInvalidConfig, field, format, args...)
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

// String prints the configuration with every secret replaced by [redacted] (empty ones stay empty).
func (c Config) String() string {
	type plain Config // without methods, so that Sprintf does not recurse
	return fmt.Sprintf("%+v", plain(c.redacted()))
}

// GoString is String for %#v.
func (c Config) GoString() string { return "clients.Config" + c.String() }

// Format prints String (GoString for %#v) whatever the verb: without it, verbs such as %d would
// print the fields, secrets included.
func (c Config) Format(f fmt.State, verb rune) {
	if verb == 'v' && f.Flag('#') {
		_, _ = io.WriteString(f, c.GoString())
		return
	}
	_, _ = io.WriteString(f, c.String())
}

func (c Config) redacted() Config {
	for _, s := range []*string{&c.EtcdPassword, &c.TemporalAPIKey, &c.RedisPassword} {
		if *s != "" {
			*s = "[redacted]"
		}
	}
	return c
}

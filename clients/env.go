package clients

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/configerr"
)

// envVars lists the environment variables of a Config.
var envVars = []struct {
	name string
	set  func(c *Config, v string) error
}{
	{"BATON_ETCD_ENDPOINTS", func(c *Config, v string) error { c.EtcdEndpoints = split(v); return nil }},
	{"BATON_ETCD_USERNAME", func(c *Config, v string) error { c.EtcdUsername = v; return nil }},
	{"BATON_ETCD_PASSWORD", func(c *Config, v string) error { c.EtcdPassword = v; return nil }},
	{"BATON_ETCD_TLS", boolEnv(func(c *Config) *bool { return &c.EtcdTLS.Enabled })},
	{"BATON_ETCD_CA_FILE", func(c *Config, v string) error { c.EtcdTLS.CAFile = v; return nil }},
	{"BATON_ETCD_CERT_FILE", func(c *Config, v string) error { c.EtcdTLS.CertFile = v; return nil }},
	{"BATON_ETCD_KEY_FILE", func(c *Config, v string) error { c.EtcdTLS.KeyFile = v; return nil }},
	{"BATON_ETCD_SERVER_NAME", func(c *Config, v string) error { c.EtcdTLS.ServerName = v; return nil }},
	{"BATON_ETCD_DIAL_TIMEOUT", func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return fmt.Errorf("must be a positive duration such as 5s, got %q", v)
		}
		c.EtcdDialTimeout = d
		return nil
	}},
	{"BATON_TEMPORAL_ADDRESS", func(c *Config, v string) error { c.TemporalAddress = v; return nil }},
	{"BATON_TEMPORAL_NAMESPACE", func(c *Config, v string) error { c.TemporalNamespace = v; return nil }},
	{"BATON_TEMPORAL_API_KEY", func(c *Config, v string) error { c.TemporalAPIKey = v; return nil }},
	{"BATON_TEMPORAL_TLS", boolEnv(func(c *Config) *bool { return &c.TemporalTLS.Enabled })},
	{"BATON_TEMPORAL_TLS_DISABLED", boolEnv(func(c *Config) *bool { return &c.TemporalTLSDisabled })},
	{"BATON_TEMPORAL_CA_FILE", func(c *Config, v string) error { c.TemporalTLS.CAFile = v; return nil }},
	{"BATON_TEMPORAL_CERT_FILE", func(c *Config, v string) error { c.TemporalTLS.CertFile = v; return nil }},
	{"BATON_TEMPORAL_KEY_FILE", func(c *Config, v string) error { c.TemporalTLS.KeyFile = v; return nil }},
	{"BATON_TEMPORAL_SERVER_NAME", func(c *Config, v string) error { c.TemporalTLS.ServerName = v; return nil }},
	{"BATON_REDIS_ADDR", func(c *Config, v string) error { c.RedisAddr = v; return nil }},
	{"BATON_REDIS_CLUSTER_ADDRS", func(c *Config, v string) error { c.RedisClusterAddrs = split(v); return nil }},
	{"BATON_REDIS_USERNAME", func(c *Config, v string) error { c.RedisUsername = v; return nil }},
	{"BATON_REDIS_PASSWORD", func(c *Config, v string) error { c.RedisPassword = v; return nil }},
	{"BATON_REDIS_DB", func(c *Config, v string) error {
		db, err := strconv.Atoi(v)
		if err != nil || db < 0 {
			return fmt.Errorf("must be a non-negative integer, got %q", v)
		}
		c.RedisDB = db
		return nil
	}},
	{"BATON_REDIS_TLS", boolEnv(func(c *Config) *bool { return &c.RedisTLS.Enabled })},
	{"BATON_REDIS_CA_FILE", func(c *Config, v string) error { c.RedisTLS.CAFile = v; return nil }},
	{"BATON_REDIS_CERT_FILE", func(c *Config, v string) error { c.RedisTLS.CertFile = v; return nil }},
	{"BATON_REDIS_KEY_FILE", func(c *Config, v string) error { c.RedisTLS.KeyFile = v; return nil }},
	{"BATON_REDIS_SERVER_NAME", func(c *Config, v string) error { c.RedisTLS.ServerName = v; return nil }},
}

// EnvVars lists the environment variables LoadEnv reads.
func EnvVars() []string {
	out := make([]string, len(envVars))
	for i, e := range envVars {
		out[i] = e.name
	}
	return out
}

// LoadEnv applies the BATON_ETCD_*, BATON_TEMPORAL_* and BATON_REDIS_* variables to base. An
// error wraps ErrInvalidConfig and names the variable; it never holds a secret's value.
// Unknown variables in those namespaces are refused, so a typo does not leave a default in force
// (baton.LoadEnv leaves the namespaces to this function), except the names of a Kubernetes service
// link's shape (baton.IsServiceLinkEnv: a Service named baton-etcd injects BATON_ETCD_SERVICE_HOST,
// BATON_ETCD_PORT, ...), which are ignored; baton.ServiceLinkEnv lists them for the caller to log.
// The variables (EnvVars lists them):
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
func LoadEnv(base Config) (Config, error) {
	if err := unknownEnv(os.Environ()); err != nil {
		return base, err
	}
	return loadEnv(base, os.LookupEnv)
}

func unknownEnv(environ []string) error {
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(baton.ClientEnvPrefixes(), func(p string) bool { return strings.HasPrefix(name, p) }) ||
			slices.Contains(EnvVars(), name) || baton.IsServiceLinkEnv(name) {
			continue
		}
		return fmt.Errorf("%w: %q is not a client setting (see clients.EnvVars)", ErrInvalidConfig, name)
	}
	return nil
}

func loadEnv(base Config, lookup func(string) (string, bool)) (Config, error) {
	for _, e := range envVars {
		v, ok := lookup(e.name)
		if !ok {
			continue
		}
		if err := e.set(&base, strings.TrimSpace(v)); err != nil {
			// The value is never echoed for a secret.
			return base, configerr.New(ErrInvalidConfig, e.name, "%v", err)
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

func boolEnv(field func(*Config) *bool) func(*Config, string) error {
	return func(c *Config, v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("must be true or false, got %q", v)
		}
		*field(c) = b
		return nil
	}
}

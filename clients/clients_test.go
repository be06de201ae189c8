package clients

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestConfigValidate(t *testing.T) {
	ok := Config{EtcdEndpoints: []string{"http://127.0.0.1:2379"}}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config must validate: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "missing.pem")
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	if err := os.WriteFile(garbage, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	with := func(f func(*Config)) Config { c := ok; f(&c); return c }
	for _, tc := range []struct {
		name  string
		cfg   Config
		field string
	}{
		{"no etcd", Config{}, "EtcdEndpoints"},
		{"password without user", with(func(c *Config) { c.EtcdPassword = "s3cret" }), "EtcdUsername"},
		{"temporal without port", with(func(c *Config) { c.TemporalAddress = "temporal" }), "TemporalAddress"},
		{"redis without port", with(func(c *Config) { c.RedisAddr = "redis" }), "RedisAddr"},
		{"missing CA", with(func(c *Config) { c.EtcdTLS.CAFile = missing }), "EtcdTLS"},
		{"garbage CA", with(func(c *Config) { c.RedisTLS.CAFile = garbage }), "RedisTLS"},
		{"cert without key", with(func(c *Config) { c.TemporalTLS.CertFile = garbage }), "TemporalTLS"},
		{"user without password", with(func(c *Config) { c.EtcdUsername = "baton" }), "EtcdPassword"},
		{"TLS disabled and TLS files", with(func(c *Config) { c.TemporalTLSDisabled, c.TemporalTLS.Enabled = true, true }), "TemporalTLSDisabled"},
		{"plain-text etcd endpoint with TLS", with(func(c *Config) { c.EtcdTLS.Enabled = true }), "EtcdEndpoints[0]"},
		{"one server and a cluster", with(func(c *Config) { c.RedisAddr, c.RedisClusterAddrs = "r:6379", []string{"c1:7000"} }), "RedisAddr must not be set with RedisClusterAddrs"},
		{"cluster seed without port", with(func(c *Config) { c.RedisClusterAddrs = []string{"c1:7000", "c2"} }), "RedisClusterAddrs[1] must be host:port"},
		{"cluster with a database", with(func(c *Config) { c.RedisClusterAddrs, c.RedisDB = []string{"c1:7000"}, 2 }), "RedisDB must be 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig naming %s", err, tc.field)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

func TestLoadEnv(t *testing.T) {
	t.Setenv("BATON_ETCD_ENDPOINTS", "http://a:2379, http://b:2379")
	t.Setenv("BATON_REDIS_DB", "3")
	t.Setenv("BATON_REDIS_PASSWORD", "hunter2")
	t.Setenv("BATON_TEMPORAL_TLS", "true")
	c, err := LoadEnv(Config{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.EtcdEndpoints) != 2 || c.RedisDB != 3 || c.RedisPassword != "hunter2" || !c.TemporalTLS.Enabled {
		t.Fatalf("loaded %+v", c)
	}
	t.Setenv("BATON_REDIS_DB", "0")
	t.Setenv("BATON_REDIS_CLUSTER_ADDRS", "c1:7000, c2:7000,")
	if c, err = LoadEnv(Config{}); err != nil || len(c.RedisClusterAddrs) != 2 || c.RedisClusterAddrs[1] != "c2:7000" {
		t.Fatalf("BATON_REDIS_CLUSTER_ADDRS loaded %q, %v", c.RedisClusterAddrs, err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("a cluster without RedisAddr must validate (no single-server default): %v", err)
	}
	t.Setenv("BATON_REDIS_DB", "-1")
	if _, err := LoadEnv(Config{}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "BATON_REDIS_DB") {
		t.Fatalf("bad BATON_REDIS_DB: %v", err)
	}
	if len(EnvVars()) < 20 {
		t.Fatalf("EnvVars() = %v", EnvVars())
	}
}

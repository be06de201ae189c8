package baton

import (
	"errors"
	"strings"
	"testing"
)

// The dev stack's env file (integration/tools/cmd/devstack -env-file, as printed) holds the client
// variables and its own; sourced beside Baton's settings it must load without an ignore list, while
// a misspelt Baton setting is still refused. integration/tools/cmd/devstack checks its real output too.
func TestLoadEnvTakesTheDevStackEnvFile(t *testing.T) {
	devstack := `BATON_ETCD_ENDPOINTS=http://127.0.0.1:40001
BATON_TEMPORAL_ADDRESS=127.0.0.1:40002
BATON_TEMPORAL_NAMESPACE=default
BATON_REDIS_ADDR=127.0.0.1:40003
BATON_DEVSTACK_REDIS=real
BATON_PROJECT=billing
BATON_QUEUES=orders`
	vars := map[string]string{}
	for line := range strings.Lines(devstack) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), "=")
		vars[k] = v
	}
	lookup, environ := env(vars)
	c, err := loadEnv(Config{}, lookup, environ, nil)
	if err != nil {
		t.Fatalf("LoadEnv with the dev stack's env file: %v", err)
	}
	if c.Project != "billing" || len(c.Queues) != 1 {
		t.Fatalf("loaded %+v", c)
	}
	vars["BATON_QUEUS"] = "refunds"
	lookup, environ = env(vars)
	if _, err := loadEnv(Config{}, lookup, environ, nil); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "BATON_QUEUS") {
		t.Fatalf("a misspelt setting: err = %v, want it refused by name", err)
	}
}

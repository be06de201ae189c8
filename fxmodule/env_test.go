package fxmodule

import (
	"errors"
	"strings"
	"testing"
)

// baton.LoadEnv leaves the client namespaces to LoadClientEnv, which refuses a misspelt name there
// and takes what the dev stack's env file holds.
func TestLoadClientEnvRefusesUnknownClientVariables(t *testing.T) {
	devstack := []string{"BATON_ETCD_ENDPOINTS=http://127.0.0.1:1", "BATON_TEMPORAL_ADDRESS=127.0.0.1:2",
		"BATON_TEMPORAL_NAMESPACE=default", "BATON_REDIS_ADDR=127.0.0.1:3", "BATON_DEVSTACK_REDIS=real",
		"BATON_PROJECT=billing", "PATH=/bin"}
	if err := unknownClientEnv(devstack); err != nil {
		t.Fatalf("the dev stack's variables: %v", err)
	}
	err := unknownClientEnv(append(devstack, "BATON_REDIS_ADRR=127.0.0.1:3"))
	if !errors.Is(err, ErrInvalidClientConfig) || !strings.Contains(err.Error(), "BATON_REDIS_ADRR") {
		t.Fatalf("err = %v, want BATON_REDIS_ADRR refused", err)
	}
}

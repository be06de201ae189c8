package clients

import (
	"errors"
	"strings"
	"testing"

	"github.com/baton-run/baton"
)

// baton.LoadEnv leaves the client namespaces to LoadEnv, which refuses a misspelt name there
// and takes what the dev stack's env file holds.
func TestLoadEnvRefusesUnknownClientVariables(t *testing.T) {
	devstack := []string{"BATON_ETCD_ENDPOINTS=http://127.0.0.1:1", "BATON_TEMPORAL_ADDRESS=127.0.0.1:2",
		"BATON_TEMPORAL_NAMESPACE=default", "BATON_REDIS_ADDR=127.0.0.1:3", "BATON_DEVSTACK_REDIS=real",
		"BATON_PROJECT=billing", "PATH=/bin"}
	if err := unknownEnv(devstack); err != nil {
		t.Fatalf("the dev stack's variables: %v", err)
	}
	err := unknownEnv(append(devstack, "BATON_REDIS_ADRR=127.0.0.1:3"))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "BATON_REDIS_ADRR") {
		t.Fatalf("err = %v, want BATON_REDIS_ADRR refused", err)
	}
}

// A Service named baton-etcd or baton-redis in a worker's namespace injects variables in the client
// namespaces: they are ignored, while a typo beside them is still refused by name.
func TestLoadEnvIgnoresServiceLinks(t *testing.T) {
	environ := []string{"BATON_ETCD_ENDPOINTS=http://127.0.0.1:1",
		"BATON_ETCD_SERVICE_HOST=10.0.0.1", "BATON_ETCD_SERVICE_PORT=2379", "BATON_ETCD_SERVICE_PORT_CLIENT=2379",
		"BATON_ETCD_PORT=tcp://10.0.0.1:2379", "BATON_ETCD_PORT_2379_TCP=tcp://10.0.0.1:2379",
		"BATON_ETCD_PORT_2379_TCP_PROTO=tcp", "BATON_ETCD_PORT_2379_TCP_PORT=2379", "BATON_ETCD_PORT_2379_TCP_ADDR=10.0.0.1",
		"BATON_REDIS_PORT=tcp://10.0.0.3:6379", "BATON_TEMPORAL_SERVICE_HOST=10.0.0.2"}
	if err := unknownEnv(environ); err != nil {
		t.Fatalf("service links refused: %v", err)
	}
	err := unknownEnv(append(environ, "BATON_REDIS_ADRR=127.0.0.1:3"))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "BATON_REDIS_ADRR") {
		t.Fatalf("err = %v, want BATON_REDIS_ADRR refused beside the service links", err)
	}
}

// No client variable has the shape of a service link: a typo of it would be ignored, not refused.
func TestNoClientSettingHasTheServiceLinkShape(t *testing.T) {
	for _, name := range EnvVars() {
		if baton.IsServiceLinkEnv(name) {
			t.Errorf("%s has the shape of a Kubernetes service link", name)
		}
	}
}

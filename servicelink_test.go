package baton

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestIsServiceLinkEnv(t *testing.T) {
	for name, want := range map[string]bool{
		// What the kubelet injects for Services "baton-worker" (TCP 80, port named http), "baton"
		// (UDP 53) and "baton-etcd-0" (SCTP 9).
		"BATON_WORKER_SERVICE_HOST":          true,
		"BATON_WORKER_SERVICE_PORT":          true,
		"BATON_WORKER_SERVICE_PORT_HTTP":     true,
		"BATON_WORKER_PORT":                  true,
		"BATON_WORKER_PORT_80_TCP":           true,
		"BATON_WORKER_PORT_80_TCP_PROTO":     true,
		"BATON_WORKER_PORT_80_TCP_PORT":      true,
		"BATON_WORKER_PORT_80_TCP_ADDR":      true,
		"BATON_PORT_53_UDP":                  true,
		"BATON_SERVICE_HOST":                 true,
		"BATON_ETCD_0_PORT_9_SCTP_ADDR":      true,
		"BATON_ETCD_0_SERVICE_PORT_CLIENT_2": true,
		// Not of that shape: typos and settings are judged by the loaders.
		"BATON_QUEUSE":                 false,
		"BATON_QUEUES":                 false,
		"BATON_WORKER_PORTS":           false,
		"BATON_WORKER_PORT_HTTP":       false, // only SERVICE_PORT takes a port's name
		"BATON_WORKER_PORT_80":         false,
		"BATON_WORKER_PORT_80_TCP_X":   false,
		"BATON_WORKER_PORT_80_ICMP":    false,
		"BATON_WORKER_SERVICE_HOSTS":   false,
		"baton_worker_service_host":    false,
		"_SERVICE_HOST":                false,
		"BATON_REDIS_SERVER_NAME":      false,
		"BATON_WORKER_SERVICE_HOST\n{": false,
	} {
		if got := IsServiceLinkEnv(name); got != want {
			t.Errorf("IsServiceLinkEnv(%q) = %v, want %v", name, got, want)
		}
	}
}

// No variable of LoadEnv's has the shape it ignores (clients checks its own the same way).
func TestNoSettingHasTheServiceLinkShape(t *testing.T) {
	for _, v := range EnvVars() {
		if IsServiceLinkEnv(v[0]) {
			t.Errorf("%s has the shape of a Kubernetes service link: a typo of it would be ignored, not refused", v[0])
		}
	}
}

// A Service named baton-worker in the worker's namespace must not stop it from starting, while a
// typo is still refused by name.
func TestLoadEnvIgnoresServiceLinks(t *testing.T) {
	environ := []string{
		"BATON_PROJECT=billing", "BATON_QUEUES=orders",
		"BATON_WORKER_SERVICE_HOST=10.0.0.1", "BATON_WORKER_PORT=tcp://10.0.0.1:80",
		"BATON_WORKER_PORT_80_TCP=tcp://10.0.0.1:80", "BATON_WORKER_PORT_80_TCP_ADDR=10.0.0.1",
		"BATON_WORKER_SERVICE_PORT=80", "BATON_WORKER_SERVICE_PORT_HTTP=80",
		"KUBERNETES_SERVICE_HOST=10.0.0.2",
	}
	c, err := LoadEnvFrom(Config{}, environ)
	if err != nil {
		t.Fatalf("LoadEnv with service links: %v", err)
	}
	if c.Project != "billing" || !slices.Equal(c.Queues, []string{"orders"}) {
		t.Fatalf("loaded %+v", c)
	}
	want := []string{"BATON_WORKER_PORT", "BATON_WORKER_PORT_80_TCP", "BATON_WORKER_PORT_80_TCP_ADDR",
		"BATON_WORKER_SERVICE_HOST", "BATON_WORKER_SERVICE_PORT", "BATON_WORKER_SERVICE_PORT_HTTP"}
	if got := ServiceLinkEnv(append(environ, "BATON_WORKER_PORT=tcp://10.0.0.1:80")); !slices.Equal(got, want) {
		t.Errorf("ServiceLinkEnv = %v, want %v", got, want)
	}
	_, err = LoadEnvFrom(Config{}, append(environ, "BATON_QUEUSE=x"))
	if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "BATON_QUEUSE") || !strings.Contains(err.Error(), "not a Baton setting") {
		t.Fatalf("BATON_QUEUSE=x beside service links: err = %v, want it refused by name", err)
	}
}

func TestLoadEnvFromTakesTheLastValueOfAKey(t *testing.T) {
	c, err := LoadEnvFrom(Config{}, []string{"BATON_PROJECT=a", "BATON_PROJECT=b", "BATON_ETCD_ENDPOINTS=x"})
	if err != nil || c.Project != "b" {
		t.Fatalf("LoadEnvFrom = %+v, %v; want project b", c.Project, err)
	}
}

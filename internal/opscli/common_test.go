package opscli

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/baton-run/baton"
)

// env replaces every BATON_* variable of the test with env.
func env(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "BATON_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

func TestParseStatusDefaults(t *testing.T) {
	env(t, map[string]string{"BATON_PROJECT": "demo", "BATON_QUEUES": "q1,q2", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"})
	s, err := parseStatus("baton", nil, &bytes.Buffer{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !s.queuesGiven || s.timeout != DefaultStatusTimeout {
		t.Errorf("status: queuesGiven %v, timeout %v", s.queuesGiven, s.timeout)
	}
	env(t, map[string]string{"BATON_PROJECT": "demo", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"})
	if s, err = parseStatus("baton", nil, &bytes.Buffer{}, nil); err != nil || s.queuesGiven {
		t.Errorf("status without queues: queuesGiven %v, err %v", s.queuesGiven, err)
	}
	// A command's own variables are not refused; anyone else's are.
	env(t, map[string]string{"BATON_PROJECT": "demo", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1", "BATON_HTTP_ADDR": ":1"})
	if _, err := parseStatus("baton", nil, &bytes.Buffer{}, []string{"BATON_HTTP_ADDR"}); err != nil {
		t.Errorf("an ignored variable was refused: %v", err)
	}
	if _, err := parseStatus("baton", nil, &bytes.Buffer{}, nil); err == nil || !strings.Contains(err.Error(), "BATON_HTTP_ADDR") {
		t.Errorf("an unknown variable was not refused by name: %v", err)
	}
	// -h prints the usage under the program's name.
	env(t, map[string]string{"BATON_PROJECT": "demo", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"})
	var out bytes.Buffer
	if _, err := parseStatus("baton", []string{"-h"}, &out, nil); err != ErrHelp || !strings.HasPrefix(out.String(), "usage: baton status [flags]") {
		t.Errorf("-h: %v, %q", err, out.String())
	}
}

func TestRefuseSecretFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		bad  bool
	}{
		{[]string{"-etcd-password=x"}, true},
		{[]string{"--etcd-password", "x"}, true},
		{[]string{"-redis-password"}, true},
		{[]string{"-temporal-api-key=x"}, true},
		{[]string{"-etcd-password-file=/p"}, false},
		{[]string{"-temporal-api-key-file", "/p"}, false},
		{[]string{"--", "-etcd-password=x"}, false},
		{[]string{"-project", "password"}, false},
		{[]string{"-new-password-env", "PW"}, false}, // names a variable, not a secret
	} {
		err := refuseSecretFlags(tt.args)
		if (err != nil) != tt.bad {
			t.Errorf("%q: err %v, want refused %v", tt.args, err, tt.bad)
		}
		if err != nil && strings.Contains(err.Error(), "=x") {
			t.Errorf("%q: the value is echoed: %v", tt.args, err)
		}
	}
}

// DefaultMoveTimeout follows the configuration: a worker learns of a drain at its next registry
// heartbeat, hands over within its stop budget, and a successor is elected within a session TTL.
func TestDefaultMoveTimeout(t *testing.T) {
	var cfg baton.Config
	if got := DefaultMoveTimeout(cfg); got != 28*time.Second {
		t.Errorf("defaults: %v, want 10s + 8s + 10s", got)
	}
	cfg.Registry.HeartbeatInterval, cfg.Election.TTL = time.Second, 4*time.Second
	if got, want := DefaultMoveTimeout(cfg), time.Second+cfg.Election.StopBudget()+4*time.Second; got != want {
		t.Errorf("short intervals: %v, want %v", got, want)
	}
}

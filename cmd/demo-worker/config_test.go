package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/baton-run/baton/cmd/demo-worker/contract"
	"github.com/baton-run/baton/takeover"
)

// Secrets set in the environment of every test: none may ever be printed.
var secrets = map[string]string{
	"BATON_ETCD_PASSWORD":    "etcd-s3cret",
	"BATON_REDIS_PASSWORD":   "redis-s3cret",
	"BATON_TEMPORAL_API_KEY": "temporal-s3cret",
}

// setEnv replaces every BATON_* variable of the process with env plus a valid base configuration
// (and the secrets); a value "-" unsets a base variable.
func setEnv(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "BATON_") {
			t.Setenv(name, "") // restored after the test
			os.Unsetenv(name)
		}
	}
	base := map[string]string{
		"BATON_PROJECT":        "demo",
		"BATON_QUEUES":         "q1,q2",
		"BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1",
		"BATON_ETCD_USERNAME":  "root",
	}
	for k, v := range secrets {
		base[k] = v
	}
	for k, v := range env {
		base[k] = v
	}
	for k, v := range base {
		if v != "-" {
			t.Setenv(k, v)
		}
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func assertNoSecrets(t *testing.T, what, out string, extra ...string) {
	t.Helper()
	for _, s := range secrets {
		extra = append(extra, s)
	}
	for _, s := range extra {
		if strings.Contains(out, s) {
			t.Errorf("%s shows the secret %q:\n%s", what, s, out)
		}
	}
}

func TestInvalidConfigurationExitsTwoNamingTheField(t *testing.T) {
	emptyFile := writeFile(t, "\n")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want string // in the one-line message
		// status names the flag and its variable instead of the field (opscli.Common.Explain).
		status string
	}{
		{name: "bad duration flag", args: []string{"-ttl=ten"}, want: "-ttl"},
		{name: "negative duration flag", args: []string{"-heartbeat-interval", "-1s"}, want: "-heartbeat-interval"},
		{name: "zero shutdown timeout", args: []string{"-shutdown-timeout=0s"}, want: "-shutdown-timeout"},
		{name: "shutdown timeout below the handover", args: []string{"-shutdown-timeout=13s"}, want: "-shutdown-timeout (BATON_SHUTDOWN_TIMEOUT) must be at least 14s"},
		{name: "bad duration env", env: map[string]string{"BATON_ELECTION_TTL": "ten"}, want: "BATON_ELECTION_TTL"},
		{name: "bad demo duration env", env: map[string]string{"BATON_SHUTDOWN_TIMEOUT": "soon"}, want: "BATON_SHUTDOWN_TIMEOUT"},
		{name: "TTL not whole seconds", args: []string{"-ttl=2500ms"}, want: "TTL"},
		{name: "stale-after below two heartbeats", args: []string{"-heartbeat-interval=20s", "-stale-after=30s"}, want: "Reconciler.StaleAfter"},
		{name: "empty project flag", args: []string{"-project="}, want: "Project", status: "-project (BATON_PROJECT) must not be empty"},
		{name: "no project", env: map[string]string{"BATON_PROJECT": "-"}, want: "Project", status: "-project (BATON_PROJECT) must not be empty"},
		{name: "project with slash", args: []string{"-project=a/b"}, want: "Project", status: "-project (BATON_PROJECT) must not contain"},
		{name: "bad queue name", args: []string{"-queues=q1,bad queue"}, want: "Queues[1]", status: "-queues (BATON_QUEUES) must not contain white space"},
		{name: "queue listed twice", args: []string{"-queues=q1,q1"}, want: "Queues[1]", status: "-queues (BATON_QUEUES) [1]"},
		{name: "no queues", args: []string{"-queues="}, want: "Queues"},
		{name: "unknown BATON_ variable", env: map[string]string{"BATON_QUEUE": "q1"}, want: "BATON_QUEUE"},
		{name: "etcd password flag", args: []string{"-etcd-password=etcd-s3cret"}, want: "-etcd-password"},
		{name: "redis password flag", args: []string{"--redis-password", "redis-s3cret"}, want: "-redis-password"},
		{name: "temporal api key flag", args: []string{"-temporal-api-key=temporal-s3cret"}, want: "-temporal-api-key"},
		{name: "missing password file", args: []string{"-etcd-password-file=/nonexistent/pw"}, want: "-etcd-password-file"},
		{name: "empty password file", args: []string{"-redis-password-file=" + emptyFile}, want: "-redis-password-file"},
		{name: "unknown flag", args: []string{"-nope"}, want: "-nope"},
		{name: "stray argument", args: []string{"extra"}, want: `"extra"`},
		{name: "bad http address", args: []string{"-http=8080"}, want: "-http"},
		{name: "http on a standard stream", args: []string{"-http=fd:1"}, want: "-http"},
		{name: "http on a bad descriptor", args: []string{"-http=fd:three"}, want: "-http"},
		{name: "bad log level", args: []string{"-log-level=loud"}, want: "-log-level"},
		{name: "bad log level env", env: map[string]string{"BATON_LOG_LEVEL": "loud"}, want: "BATON_LOG_LEVEL"},
		{name: "no etcd endpoints", env: map[string]string{"BATON_ETCD_ENDPOINTS": "-"}, want: "EtcdEndpoints", status: "-etcd-endpoints (BATON_ETCD_ENDPOINTS)"},
		{name: "bad redis address", args: []string{"-redis-addr=redis"}, want: "RedisAddr", status: "-redis-addr (BATON_REDIS_ADDR)"},
		{name: "missing CA file", args: []string{"-temporal-ca-file=/nonexistent/ca.pem"}, want: "TemporalTLS", status: "-temporal-ca-file"},
		{name: "password without user", env: map[string]string{"BATON_ETCD_USERNAME": "-"}, want: "EtcdUsername", status: "-etcd-username (BATON_ETCD_USERNAME)"},
		{name: "bad redis db env", env: map[string]string{"BATON_REDIS_DB": "x"}, want: "BATON_REDIS_DB"},
		{name: "bad pod deletion cost env", env: map[string]string{contract.EnvPodDeletionCost: "maybe"}, want: contract.EnvPodDeletionCost},
		{name: "pod deletion cost without a pod", args: []string{"-pod-deletion-cost", "-pod-name="}, want: "-pod-name"},
		// A typo beside a Kubernetes service link (a Service named baton-worker) is still refused.
		{name: "typo beside service links", env: map[string]string{"BATON_QUEUSE": "x", "BATON_WORKER_SERVICE_HOST": "10.0.0.1"}, want: "BATON_QUEUSE"},
	}
	for _, tt := range tests {
		for _, cmd := range []string{"run", "status"} {
			if cmd == "status" && (tt.name == "no queues" || !sharedByStatus(tt.args, tt.env)) {
				continue
			}
			t.Run(cmd+"/"+tt.name, func(t *testing.T) {
				setEnv(t, tt.env)
				var stdout, stderr bytes.Buffer
				code := run(context.Background(), append([]string{cmd}, tt.args...), &stdout, &stderr)
				msg := stderr.String()
				if code != exitConfig {
					t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitConfig, msg)
				}
				if strings.Count(msg, "\n") != 1 || !strings.HasSuffix(msg, "\n") {
					t.Errorf("want one line on stderr, got:\n%s", msg)
				}
				want := tt.want
				if cmd == "status" && tt.status != "" {
					want = tt.status
				}
				if !strings.Contains(msg, want) {
					t.Errorf("message does not name %s: %s", want, msg)
				}
				if stdout.Len() > 0 {
					t.Errorf("stdout not empty: %s", stdout.String())
				}
				assertNoSecrets(t, "error", msg)
			})
		}
	}
}

// sharedByStatus reports whether a case applies to `status` too (its flags are a subset of run's).
func sharedByStatus(args []string, env map[string]string) bool {
	runOnly := []string{"-ttl", "-heartbeat-interval", "-stale-after", "-shutdown-timeout", "-http", "-log-level", "-server-id", "-pod-deletion-cost"}
	for _, a := range args {
		for _, f := range runOnly {
			if strings.HasPrefix(a, f+"=") || a == f {
				return false
			}
		}
	}
	_, logLevel := env[contract.EnvLogLevel]
	_, shutdown := env[contract.EnvShutdownTimeout]
	_, podCost := env[contract.EnvPodDeletionCost]
	return !logLevel && !shutdown && !podCost
}

// A Service named baton-worker in the worker's namespace injects BATON_WORKER_* variables: the worker
// takes its configuration all the same, and its pod-deletion cost stays off unless asked for.
func TestServiceLinksDoNotStopTheWorker(t *testing.T) {
	setEnv(t, map[string]string{"BATON_WORKER_SERVICE_HOST": "10.0.0.1", "BATON_WORKER_PORT": "tcp://10.0.0.1:80",
		"BATON_WORKER_PORT_80_TCP_ADDR": "10.0.0.1", "BATON_ETCD_SERVICE_PORT": "2379"})
	o, err := parseRun(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("parseRun with service links: %v", err)
	}
	if o.Cfg.Project != "demo" || o.pod.deletionCost {
		t.Fatalf("project %q, pod deletion cost %v", o.Cfg.Project, o.pod.deletionCost)
	}
}

func TestStatusTimeoutMustBePositive(t *testing.T) {
	setEnv(t, nil)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"status", "-timeout=0s"}, &stdout, &stderr); code != exitConfig {
		t.Fatalf("exit code %d, want %d", code, exitConfig)
	}
	if !strings.Contains(stderr.String(), "-timeout") {
		t.Errorf("message does not name -timeout: %s", stderr.String())
	}
}

func TestUnknownCommand(t *testing.T) {
	setEnv(t, nil)
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"stauts"}, &stdout, &stderr); code != exitConfig {
		t.Fatalf("exit code %d, want %d", code, exitConfig)
	}
	if !strings.Contains(stderr.String(), `"stauts"`) {
		t.Errorf("message does not name the command: %s", stderr.String())
	}
}

func TestHelpExitsZero(t *testing.T) {
	setEnv(t, nil)
	for _, args := range [][]string{{"-h"}, {"run", "-h"}, {"status", "-help"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitOK {
			t.Errorf("%v: exit code %d, want 0; stderr: %s", args, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "-etcd-endpoints") {
			t.Errorf("%v: usage does not list the flags:\n%s", args, stdout.String())
		}
	}
}

func TestFlagsOverrideTheEnvironment(t *testing.T) {
	setEnv(t, map[string]string{
		"BATON_HTTP_ADDR":          ":9000",
		"BATON_ELECTION_TTL":       "5s",
		"BATON_TEMPORAL_NAMESPACE": "env-ns",
		"BATON_REDIS_ADDR":         "env:6379",
	})
	pw := writeFile(t, "file-s3cret\n")
	o, err := parseRun([]string{
		"-project=p2", "-queues", "a, b", "-server-id=w9", "-http=127.0.0.1:9100", "-ttl=3s",
		"-heartbeat-interval=2s", "-reconcile-interval=20s", "-stale-after=6s", "-registry-heartbeat-interval=1s",
		"-etcd-endpoints=http://e1:2379,http://e2:2379", "-temporal-namespace=flag-ns", "-redis-addr=flag:6379",
		"-redis-password-file=" + pw, "-shutdown-timeout=17s", "-log-level=warn",
	}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	c, cl := o.Cfg, o.Clients
	for _, chk := range []struct {
		name      string
		got, want any
	}{
		{"project", c.Project, "p2"},
		{"queues", strings.Join(c.Queues, "|"), "a|b"},
		{"server id", c.ServerID, "w9"},
		{"http", o.httpAddr, "127.0.0.1:9100"},
		{"ttl", c.Election.TTL.String(), "3s"},
		{"heartbeat", c.Heartbeat.Interval.String(), "2s"},
		{"reconcile", c.Reconciler.Interval.String(), "20s"},
		{"stale", c.Reconciler.StaleAfter.String(), "6s"},
		{"registry", c.Registry.HeartbeatInterval.String(), "1s"},
		{"endpoints", strings.Join(cl.EtcdEndpoints, "|"), "http://e1:2379|http://e2:2379"},
		{"namespace", cl.TemporalNamespace, "flag-ns"},
		{"redis", cl.RedisAddr, "flag:6379"},
		{"redis password", cl.RedisPassword, "file-s3cret"},
		{"etcd password (env)", cl.EtcdPassword, "etcd-s3cret"},
		{"shutdown", o.shutdownTimeout.String(), "17s"},
		{"log level", o.logLevel, zapcore.WarnLevel},
	} {
		if chk.got != chk.want {
			t.Errorf("%s = %v, want %v", chk.name, chk.got, chk.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	setEnv(t, nil)
	o, err := parseRun(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if o.httpAddr != ":8080" || o.shutdownTimeout != 19*time.Second || o.logLevel != zapcore.InfoLevel {
		t.Errorf("defaults: http %q, shutdown %v, level %v", o.httpAddr, o.shutdownTimeout, o.logLevel)
	}
	// The drain, which begins with the quiesce, gets the quiesce's whole bound and the terminate's;
	// the Node's stop gets its own budget, which holds the step-down's.
	if got, want := o.drainTimeout(), takeover.DefaultConfig().HandOverBudget(); got != want {
		t.Errorf("default drain %v, want %v (takeover.Config.HandOverBudget)", got, want)
	}
	if o.Cfg.ServerID == "" {
		t.Error("no server ID chosen")
	}

}

func TestStartupLogShowsSettingsNotSecrets(t *testing.T) {
	setEnv(t, map[string]string{"BATON_TEMPORAL_NAMESPACE": "ns1", "BATON_REDIS_USERNAME": "app"})
	pw := writeFile(t, "file-s3cret")
	o, err := parseRun([]string{"-server-id=w1", "-temporal-api-key-file=" + pw}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	logStartup(newLogger(&buf, zapcore.InfoLevel), o, o.Cfg)
	out := buf.String()
	if strings.Count(out, "\n") != 1 {
		t.Fatalf("want one line, got:\n%s", out)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(out), &line); err != nil {
		t.Fatalf("not a JSON line: %v\n%s", err, out)
	}
	for k, want := range map[string]any{
		"project": "demo", "server_id": "w1", "temporal_namespace": "ns1", "temporal_address": "localhost:7233",
		"etcd_password_set": true, "temporal_api_key_set": true, "redis_password_set": true, "election_ttl": "10s",
	} {
		if line[k] != want {
			t.Errorf("%s = %v, want %v", k, line[k], want)
		}
	}
	if q, _ := json.Marshal(line["queues"]); string(q) != `["q1","q2"]` {
		t.Errorf("queues = %s", q)
	}
	if e, _ := json.Marshal(line["etcd_endpoints"]); string(e) != `["http://127.0.0.1:1"]` {
		t.Errorf("etcd_endpoints = %s", e)
	}
	assertNoSecrets(t, "startup log", out, "file-s3cret")
}

// Seen through a zap observer, no field of the startup line carries a secret value.
func TestStartupLogFieldsCarryNoSecret(t *testing.T) {
	setEnv(t, nil)
	o, err := parseRun(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	logStartup(zap.New(core), o, o.Cfg)
	if logs.Len() != 1 {
		t.Fatalf("want one entry, got %d", logs.Len())
	}
	for k, v := range logs.All()[0].ContextMap() {
		assertNoSecrets(t, "startup log field "+k, fmt.Sprint(v))
	}
}

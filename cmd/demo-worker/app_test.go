package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap/zapcore"

	"github.com/baton-run/baton"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// The Temporal workers' hook must be registered after the Node's, so that the workers stop polling
// and drain before the Node resigns (see appOptions). Hooks start in registration order: with
// Temporal unreachable the workers' start fails, and the Node, registered earlier, has started.
func TestWorkersHookIsRegisteredAfterTheNodes(t *testing.T) {
	addr := closedAddr(t)
	setEnv(t, map[string]string{
		"BATON_ETCD_ENDPOINTS":   "http://" + addr,
		"BATON_TEMPORAL_ADDRESS": addr,
		"BATON_REDIS_ADDR":       addr,
		"BATON_HTTP_ADDR":        "127.0.0.1:0",
		// With credentials the etcd client authenticates while it is built, which needs a server.
		"BATON_ETCD_USERNAME": "-",
		"BATON_ETCD_PASSWORD": "-",
	})
	o, err := parseRun(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var node *baton.Node
	app := fx.New(append(appOptions(o, newLogger(&logs, zapcore.DebugLevel)), fx.Populate(&node))...)
	if err := app.Err(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = app.Start(ctx)
	if err == nil {
		_ = app.Stop(ctx)
		t.Fatal("start succeeded with Temporal unreachable")
	}
	if !strings.Contains(err.Error(), "temporal worker for task queue") {
		t.Errorf("start failed for another reason: %v", err)
	}
	if st := node.Status(); !st.Started {
		t.Errorf("the Node had not started when the Temporal workers' start failed: its hook is registered after theirs, so it would stop first\n%s", logs.String())
	}
}

func TestStartFailureExitsThree(t *testing.T) {
	addr := closedAddr(t)
	setEnv(t, map[string]string{
		"BATON_ETCD_ENDPOINTS":   "http://" + addr,
		"BATON_TEMPORAL_ADDRESS": addr,
		"BATON_REDIS_ADDR":       addr,
		"BATON_ETCD_USERNAME":    "-",
		"BATON_ETCD_PASSWORD":    "-",
	})
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "-http=127.0.0.1:0", "-start-timeout=20s"}, &stdout, &stderr)
	if code != exitStartError {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitStartError, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, `"msg":"start failed"`) || !strings.Contains(last, "temporal worker") {
		t.Errorf("last line does not say why the start failed: %s", last)
	}
	if !strings.Contains(lines[0], `"msg":"demo worker starting"`) {
		t.Errorf("first line is not the startup line: %s", lines[0])
	}
	assertNoSecrets(t, "logs", stderr.String())
}

// An etcd that does not answer at start (the worker has credentials, so its client authenticates at
// once) ends the start with one line that says so and names the settings to check, not Fx's trace
// of every constructor, hook and rollback on the way, nor the clients' retries dial by dial.
func TestUnreachableEtcdAtStartIsOneClearLine(t *testing.T) {
	addr := closedAddr(t)
	setEnv(t, map[string]string{
		"BATON_ETCD_ENDPOINTS":   "http://" + addr,
		"BATON_TEMPORAL_ADDRESS": addr,
		"BATON_REDIS_ADDR":       addr,
	})
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"run", "-http=127.0.0.1:0", "-start-timeout=20s"}, &stdout, &stderr)
	if code != exitStartError {
		t.Fatalf("exit code %d, want %d; stderr:\n%s", code, exitStartError, stderr.String())
	}
	// Judged by shape, not wording: one line or two, the last naming the endpoint and the variable
	// that sets it.
	out := stderr.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	last := lines[len(lines)-1]
	if len(lines) > 2 || !strings.Contains(last, addr) || !strings.Contains(last, "BATON_ETCD_ENDPOINTS") {
		t.Errorf("stderr has %d lines, want at most 2, the last naming %s and BATON_ETCD_ENDPOINTS:\n%s", len(lines), addr, out)
	}
	assertNoSecrets(t, "logs", out)
}

package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/internal/opscli"
)

// env replaces every BATON_* variable of the test with env.
func env(t *testing.T, env map[string]string) {
	t.Helper()
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "BATON_") {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
}

func TestUsage(t *testing.T) {
	env(t, nil)
	for _, tc := range []struct {
		args []string
		code int
		out  string
	}{
		{nil, opscli.ExitConfig, "usage: baton"},
		{[]string{"frobnicate"}, opscli.ExitConfig, `unknown command "frobnicate"`},
		{[]string{"acl"}, opscli.ExitConfig, "want redis or etcd"},
		{[]string{"help"}, opscli.ExitOK, "usage: baton"},
		{[]string{"drain"}, opscli.ExitConfig, "SERVER is required"},
		{[]string{"undrain", "a", "b"}, opscli.ExitConfig, `unexpected argument "b"`},
		{[]string{"ledger"}, opscli.ExitConfig, "KEY is required"},
		{[]string{"ledger", "-etcd-password=x", "k"}, opscli.ExitConfig, "a secret on the command line"},
		{[]string{"drain", "-h"}, opscli.ExitOK, "usage: baton drain [flags] SERVER"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.out) {
			t.Errorf("baton %q: exit %d (want %d), output %q (want %q)", tc.args, code, tc.code, stdout.String()+stderr.String(), tc.out)
		}
	}
}

// acl etcd grants exactly baton.Config.EtcdPrefixes, to the user and role asked for, and refuses a
// name a shell or etcdctl would split.
func TestACLEtcdPrintsTheConfigurationsPrefixes(t *testing.T) {
	env(t, map[string]string{"BATON_PROJECT": "billing", "BATON_ETCD_USERNAME": "svc-baton"})
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"acl", "etcd", "-role", "baton-billing"}, &stdout, &stderr); code != opscli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	prefixes := baton.Config{Project: "billing"}.EtcdPrefixes(dispatcher.DefaultLedgerPrefix)
	want := "etcdctl role add baton-billing\n"
	for _, p := range prefixes {
		want += "etcdctl role grant-permission baton-billing readwrite " + p + " --prefix=true\n"
	}
	want += "etcdctl user add svc-baton\netcdctl user grant-role svc-baton baton-billing\n"
	if stdout.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", stdout.String(), want)
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"acl", "etcd", "-user", "two words"}, &stdout, &stderr); code != opscli.ExitConfig {
		t.Fatalf("a user with a space: exit %d", code)
	}
	env(t, nil)
	if code := run(context.Background(), []string{"acl", "etcd"}, &stdout, &stderr); code != opscli.ExitConfig || !strings.Contains(stderr.String(), "BATON_PROJECT") {
		t.Fatalf("no project: exit %d, %q", code, stderr.String())
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/clients"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/internal/opscli"
	"github.com/baton-run/baton/ledger"
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
		{[]string{"ledger", "task-1"}, opscli.ExitConfig, "KEY must be a dispatch key, 64 lowercase hex digits"},
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
	prefixes := baton.Config{Project: "billing"}.EtcdPrefixes(ledger.DefaultPrefix)
	want := "etcdctl role add baton-billing\n"
	for _, p := range prefixes {
		want += "etcdctl role grant-permission baton-billing readwrite " + p + " --prefix=true\n"
	}
	key, end := ledger.LegacyRange(ledger.DefaultPrefix)
	want += "# read-only, until the workers no longer read the ledger's layout before per-project keys (-legacy-ledger=false then)\n" +
		"etcdctl role grant-permission baton-billing read " + key + " " + end + "\n"
	want += "# the password is read from $ETCD_NEW_USER_PASSWORD when the next line runs (not from the shell's history); etcdctl's arguments show it to ps meanwhile\n" +
		`etcdctl user add svc-baton --new-user-password="${ETCD_NEW_USER_PASSWORD:?set ETCD_NEW_USER_PASSWORD to the password of the new user}"` + "\n" +
		"etcdctl user grant-role svc-baton baton-billing\n"
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

// The printed commands run unattended: `user add` takes the password from the variable or the file
// the operator named when it runs (never printed, never prompted for), refuses to run without it, and
// -extra-prefix grants the application's own prefixes after Baton's.
func TestACLEtcdIsScriptable(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	env(t, map[string]string{"BATON_PROJECT": "billing"})
	pwFile := filepath.Join(t.TempDir(), "pw")
	if err := os.WriteFile(pwFile, []byte("from-file"), 0o600); err != nil {
		t.Fatal(err)
	}
	// etcdctl as a shell function that prints its arguments, one a line.
	script := func(args ...string) string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"acl", "etcd"}, args...), &stdout, &stderr); code != opscli.ExitOK {
			t.Fatalf("acl etcd %q: exit %d: %s", args, code, stderr.String())
		}
		return "etcdctl() { printf '%s\\n' \"$@\"; }\n" + stdout.String()
	}
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		want string
	}{
		{"default variable", nil, []string{"ETCD_NEW_USER_PASSWORD=s3cret"}, "--new-user-password=s3cret"},
		{"named variable", []string{"-new-password-env", "PW"}, []string{"PW=other"}, "--new-user-password=other"},
		{"file", []string{"-new-password-file", pwFile}, nil, "--new-user-password=from-file"},
	} {
		cmd := exec.Command(sh, "-e", "-c", script(tc.args...))
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, tc.env...)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "\n"+tc.want+"\n") {
			t.Errorf("%s: %v, output\n%s\nwant a line %q", tc.name, err, out, tc.want)
		}
		if strings.Contains(script(tc.args...), strings.TrimPrefix(tc.want, "--new-user-password=")) {
			t.Errorf("%s: the password is in the printed commands", tc.name)
		}
	}
	cmd := exec.Command(sh, "-e", "-c", script())
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	if out, err := cmd.CombinedOutput(); err == nil || strings.Contains(string(out), "--new-user-password") ||
		!strings.Contains(string(out), "ETCD_NEW_USER_PASSWORD") {
		t.Errorf("user add without the variable ran, or did not name it: %v\n%s", err, out)
	}

	out := script("-extra-prefix", "/app/billing/announce/", "-extra-prefix", "/app/billing/fenced/")
	for _, p := range []string{"/app/billing/announce/", "/app/billing/fenced/"} {
		if !strings.Contains(out, "etcdctl role grant-permission baton readwrite "+p+" --prefix=true\n") {
			t.Errorf("-extra-prefix %s not granted:\n%s", p, out)
		}
	}
	var stdout, stderr bytes.Buffer
	for _, args := range [][]string{
		{"-extra-prefix", "has space"},
		{"-new-password-env", "A", "-new-password-file", pwFile},
		{"-new-password-env", "1BAD"},
	} {
		if code := run(context.Background(), append([]string{"acl", "etcd"}, args...), &stdout, &stderr); code != opscli.ExitConfig {
			t.Errorf("acl etcd %q: exit %d, want %d", args, code, opscli.ExitConfig)
		}
	}
	// -h shows a default once.
	stdout.Reset()
	run(context.Background(), []string{"acl", "etcd", "-h"}, &stdout, &stderr)
	if strings.Contains(stdout.String(), "(default baton) (default") || !strings.Contains(stdout.String(), "-extra-prefix") {
		t.Errorf("acl etcd -h:\n%s", stdout.String())
	}
}

// helpOutputs runs every command with -h and returns its output by command.
func helpOutputs(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, args := range [][]string{
		{"status"}, {"verify"}, {"ledger"}, {"ledger", "find"}, {"transfer"}, {"drain"}, {"undrain"}, {"acl", "redis"}, {"acl", "etcd"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append(args, "-h"), &stdout, &stderr); code != opscli.ExitOK {
			t.Fatalf("baton %q -h: exit %d: %s", args, code, stderr.String())
		}
		out[strings.Join(args, " ")] = stdout.String()
	}
	return out
}

// Every BATON_* variable a command's help names is one baton.EnvVars or clients.EnvVars
// knows: help cannot send an operator to a variable nothing reads.
func TestHelpNamesOnlyKnownVariables(t *testing.T) {
	env(t, nil)
	known := map[string]bool{}
	for _, v := range baton.EnvVars() {
		known[v[0]] = true
	}
	for _, v := range clients.EnvVars() {
		known[v] = true
	}
	seen := 0
	for cmd, help := range helpOutputs(t) {
		for _, name := range regexp.MustCompile(`BATON_[A-Z0-9_]*[A-Z0-9]`).FindAllString(help, -1) {
			seen++
			if !known[name] {
				t.Errorf("baton %s -h names %s, which neither baton.EnvVars nor clients.EnvVars lists", cmd, name)
			}
		}
	}
	if seen == 0 {
		t.Fatal("no BATON_* variable in any help: the test reads nothing")
	}
}

// The new flags show in -h.
func TestHelpShowsTheFlags(t *testing.T) {
	env(t, nil)
	help := helpOutputs(t)
	for cmd, flags := range map[string][]string{
		"verify":      {"-since"},
		"ledger find": {"-type", "-id", "-payload-sha256", "-parent"},
		"drain":       {"-wait", "-timeout"},
		"transfer":    {"-project", "-to", "-timeout"},
		"acl etcd":    {"-extra-prefix", "-new-password-env", "-new-password-file"},
	} {
		for _, f := range flags {
			if !strings.Contains(help[cmd], "  "+f+" ") && !strings.Contains(help[cmd], "  "+f+"\n") {
				t.Errorf("baton %s -h does not show %s:\n%s", cmd, f, help[cmd])
			}
		}
	}
}

// Configuration errors name the flag and the variable that set the field, then the rule.
func TestErrorsNameTheFlagAndTheVariable(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{nil, []string{"verify"}, "-project (BATON_PROJECT) must not be empty"},
		{map[string]string{"BATON_PROJECT": "p"}, []string{"verify"}, "-etcd-endpoints (BATON_ETCD_ENDPOINTS) must name at least one endpoint"},
		{map[string]string{"BATON_PROJECT": "p", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"}, []string{"verify", "-queues", "a b"},
			`-queues (BATON_QUEUES) must not contain white space (U+0020 at byte 1), got "a b"`},
		{map[string]string{"BATON_PROJECT": "p", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"}, []string{"verify", "-temporal-address", "nohost"},
			`-temporal-address (BATON_TEMPORAL_ADDRESS) must be host:port, got "nohost"`},
		{map[string]string{"BATON_PROJECT": "p", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1", "BATON_ELECTION_TTL": "1s"}, []string{"verify"},
			"BATON_ELECTION_TTL (Election.TTL) must be at least"},
		{map[string]string{"BATON_PROJECT": "p", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"}, []string{"verify", "-since", "yesterday"},
			"-since: must be a positive duration (30m), an RFC 3339 time (2026-11-28T15:04:05Z) or an etcd revision"},
		{nil, []string{"status"}, "-project (BATON_PROJECT) must not be empty"},
		{map[string]string{"BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"}, []string{"drain", "w1"}, "-project (BATON_PROJECT) must not be empty"},
		{map[string]string{"BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"}, []string{"transfer", "q1"}, "-project (BATON_PROJECT) must not be empty"},
	} {
		env(t, tc.env)
		var stdout, stderr bytes.Buffer
		code := run(context.Background(), tc.args, &stdout, &stderr)
		if code != opscli.ExitConfig || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("baton %q with %v: exit %d, %q; want %d and %q", tc.args, tc.env, code, stderr.String(), opscli.ExitConfig, tc.want)
		}
	}
}

// ledger refuses what is not a dispatch key, saying what one looks like and how to find it; ledger
// find computes the key with dispatcher.Request.Key and prints it before it reads etcd.
func TestLedgerKeys(t *testing.T) {
	env(t, map[string]string{"BATON_PROJECT": "p", "BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"})
	var stdout, stderr bytes.Buffer
	for _, key := range []string{"task-1", strings.Repeat("A", 64), strings.Repeat("0", 63)} {
		stderr.Reset()
		code := run(context.Background(), []string{"ledger", key}, &stdout, &stderr)
		if code != opscli.ExitConfig || !strings.Contains(stderr.String(), "64 lowercase hex digits") || !strings.Contains(stderr.String(), "ledger find") {
			t.Errorf("ledger %q: exit %d, %q", key, code, stderr.String())
		}
	}
	req := dispatcher.Request{Type: "invoice", TaskID: "t-42", PayloadSHA256: strings.Repeat("ab", 32), Parent: "s-1"}
	stdout.Reset()
	code := run(context.Background(), []string{"ledger", "find", "-timeout", "200ms", "-type", req.Type, "-id", req.TaskID,
		"-payload-sha256", req.PayloadSHA256, "-parent", req.Parent}, &stdout, &stderr)
	if code != opscli.ExitUnclean || !strings.HasPrefix(stdout.String(), "key "+req.Key()+" ") {
		t.Errorf("ledger find: exit %d (want %d: no etcd), %q; want the key %s first", code, opscli.ExitUnclean, stdout.String(), req.Key())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-type", "t", "-id", "x"}, "-payload-sha256: dispatcher: invalid request: payload_sha256 must not be empty"},
		{[]string{"-id", "x", "-payload-sha256", req.PayloadSHA256}, "-type: dispatcher: invalid request: type must not be empty"},
		{[]string{"-type", "t", "-id", "x", "-payload-sha256", "abc"}, "-payload-sha256: dispatcher: invalid request: payload_sha256 must be 64 hex digits"},
		{[]string{"-type", "t", "-id", "x", "-payload-sha256", req.PayloadSHA256, "extra"}, `unexpected argument "extra"`},
	} {
		stderr.Reset()
		if code := run(context.Background(), append([]string{"ledger", "find"}, tc.args...), &stdout, &stderr); code != opscli.ExitConfig ||
			!strings.Contains(stderr.String(), tc.want) {
			t.Errorf("ledger find %q: exit %d, %q; want %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

// transfer takes -project like every other command; PROJECT before QUEUE still works, with a note.
func TestTransferProject(t *testing.T) {
	env(t, map[string]string{"BATON_ETCD_ENDPOINTS": "http://127.0.0.1:1"})
	var stdout, stderr bytes.Buffer
	// No etcd answers: the arguments were accepted when the command gets as far as reading it (exit 1).
	code := run(context.Background(), []string{"transfer", "-timeout", "200ms", "p1", "q1"}, &stdout, &stderr)
	if code != opscli.ExitUnclean || !strings.Contains(stderr.String(), "PROJECT before QUEUE is deprecated; use -project p1") {
		t.Errorf("transfer p1 q1: exit %d, %q", code, stderr.String())
	}
	stderr.Reset()
	code = run(context.Background(), []string{"transfer", "-timeout", "200ms", "-project", "p1", "q1"}, &stdout, &stderr)
	if code != opscli.ExitUnclean || strings.Contains(stderr.String(), "deprecated") {
		t.Errorf("transfer -project p1 q1: exit %d, %q", code, stderr.String())
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"transfer", "-project", "p1"}, "QUEUE is required"},
		{[]string{"transfer", "-project", "p1", "p2", "q1"}, `PROJECT "p2" and -project "p1" differ`},
		{[]string{"transfer", "-project", "p1", "a", "b", "c"}, `unexpected argument "c" after QUEUE`},
	} {
		stderr.Reset()
		if code := run(context.Background(), tc.args, &stdout, &stderr); code != opscli.ExitConfig || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("baton %q: exit %d, %q; want %q", tc.args, code, stderr.String(), tc.want)
		}
	}
}

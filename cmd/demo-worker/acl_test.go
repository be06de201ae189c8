package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/baton-run/baton"
)

func TestRedisACLPrintsTheConfigurationsRules(t *testing.T) {
	t.Setenv("BATON_HEARTBEAT_PREFIX", "hb:")
	t.Setenv("BATON_PROJECT", "billing")
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"redis-acl", "-user", "svc-baton"}, &out, &errOut); code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	cfg := baton.Config{Project: "billing"}
	cfg.Heartbeat.Prefix = "hb:"
	want := "ACL SETUSER svc-baton on >PASSWORD " + strings.Join(cfg.RedisACLRules(), " ") + "\n"
	if out.String() != want {
		t.Fatalf("printed\n%s\nwant\n%s", out.String(), want)
	}
	if !strings.Contains(out.String(), "~hb:{billing}/*") {
		t.Fatalf("the heartbeat prefix from the environment is not in the key patterns: %s", out.String())
	}

	out.Reset()
	errOut.Reset()
	if code := run(context.Background(), []string{"redis-acl", "-user", "two words"}, &out, &errOut); code != exitConfig ||
		!strings.Contains(errOut.String(), "-user") {
		t.Fatalf("a user name with a space: exit %d, %q", code, errOut.String())
	}
}

package baton

import (
	"os"
	"strings"
	"testing"
)

// The README shows the ACL line to operators; it must be the one the library ships.
func TestREADMEShowsTheShippedRedisACL(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(string(readme)), " ")
	want := "ACL SETUSER baton on >PASSWORD " + strings.Join(Config{Project: "payments"}.RedisACLRules(), " ")
	if !strings.Contains(flat, want) {
		t.Fatalf("README.md does not show the shipped ACL:\n%s", want)
	}
}

// A project's patterns reach its own keys, in both heartbeat layouts, and no key of a project whose
// name starts like it; glob characters in a name match only themselves.
func TestRedisACLRulesArePerProject(t *testing.T) {
	rules := Config{Project: "pay"}.RedisACLRules()
	want := []string{"resetkeys", "~dispatcher:heartbeat:{pay}/*", "~dispatcher:heartbeat:dispatcher-pay-*", "~baton:registry:{pay}/*", "resetchannels"}
	if strings.Join(rules[:len(want)], " ") != strings.Join(want, " ") {
		t.Fatalf("rules %q, want them to start with %q", rules, want)
	}
	c := Config{Project: "a*b"}
	c.Reconciler.SkipLegacyHeartbeats = true
	if got := c.RedisACLRules()[1:3]; got[0] != `~dispatcher:heartbeat:{a\*b}/*` || got[1] != `~baton:registry:{a\*b}/*` {
		t.Fatalf("escaped patterns without the old layout: %q", got)
	}
}

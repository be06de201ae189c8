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
	want := "ACL SETUSER baton on >PASSWORD " + strings.Join(Config{}.RedisACLRules(), " ")
	if !strings.Contains(flat, want) {
		t.Fatalf("README.md does not show the shipped ACL:\n%s", want)
	}
}

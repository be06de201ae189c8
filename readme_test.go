package baton

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The README's "Using it" snippet compiles as written and its Fx graph resolves (fx.New reports no
// error), with the constructors it names returning what applications' constructors return (a
// *redis.Client, not the interface). Nothing connects: the clients are lazy and the app never starts.
func TestReadmeUsingItCompiles(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program")
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	snippet, err := goBlockAfter(string(readme), "## Using it")
	if err != nil {
		t.Fatal(err)
	}
	// A fixed directory: the go command caches the program between runs when its source is unchanged.
	dir := filepath.Join("testdata", "readme-using-it")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	src := `package main

import (
	"fmt"
	"os"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/fxmodule"
)

func newEtcdClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: []string{"127.0.0.1:1"}})
}
func newTemporalClient() (client.Client, error) { return client.NewLazyClient(client.Options{}) }
func newRedisClient() *redis.Client            { return redis.NewClient(&redis.Options{}) }

func main() {
	app := ` + snippet + `
	if err := app.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "run", "./"+filepath.ToSlash(dir))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the README's snippet does not build or its Fx graph fails: %v\n%s\n%s", err, out, snippet)
	}
}

// goBlockAfter returns the first ```go block after heading.
func goBlockAfter(doc, heading string) (string, error) {
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	if !ok {
		return "", errors.New("no heading " + heading)
	}
	_, rest, ok = strings.Cut(rest, "```go\n")
	if !ok {
		return "", errors.New("no go block after " + heading)
	}
	block, _, ok := strings.Cut(rest, "```")
	if !ok {
		return "", errors.New("unterminated go block after " + heading)
	}
	return strings.TrimSpace(block), nil
}

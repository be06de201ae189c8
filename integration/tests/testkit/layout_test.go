package testkit_test

import (
	"bytes"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The integration module is laid out by audience: servers/ (the real servers and worker processes
// that tests and tools start, and the harness they share), sim/ (the deterministic simulator: modelled
// etcd, Temporal and Redis and the seeded worlds that run Baton's real code on them), tests/ (the
// behaviour suites and their testkit) and tools/ (drill, benchmarks, demo, devstack, the Temporal dev
// server). Servers and the simulator import neither each other nor the rest (the simulator's models
// must not lean on a real server), tests and tools never import each other, every Go package sits in
// one of the four, and the servers stay at or under maxServerLines non-test lines.
const maxServerLines = 3000

func TestIntegrationLayoutByAudience(t *testing.T) {
	const module = "github.com/baton-run/baton/integration/"
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	may := map[string][]string{"servers": {"servers"}, "sim": {"sim"}, "tests": {"servers", "sim", "tests"},
		"tools": {"servers", "sim", "tools"}}
	serverLines := 0
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		audience, _, _ := strings.Cut(filepath.ToSlash(rel), "/")
		allowed, ok := may[audience]
		if !ok {
			t.Errorf("%s: Go code outside servers/, sim/, tests/ and tools/", rel)
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			to, inModule := strings.CutPrefix(p, module)
			if !inModule {
				continue
			}
			if top, _, _ := strings.Cut(to, "/"); !slices.Contains(allowed, top) {
				t.Errorf("%s (%s) imports %s: %s may import only %v", rel, audience, to, audience, allowed)
			}
		}
		if audience == "servers" && !strings.HasSuffix(path, "_test.go") {
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			serverLines += bytes.Count(b, []byte("\n"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if serverLines > maxServerLines {
		t.Errorf("servers/ has %d non-test lines, over %d: move what only tests or tools use to them", serverLines, maxServerLines)
	}
	t.Logf("servers/: %d non-test lines (at most %d)", serverLines, maxServerLines)
}

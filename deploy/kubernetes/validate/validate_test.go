package validate

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// kubernetesDir is deploy/kubernetes, seen from this package's directory (where go test runs).
const kubernetesDir = ".."

// overlays lists every overlay under deploy/kubernetes/overlays: a new one is checked without a test
// naming it.
func overlays(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(kubernetesDir, "overlays"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.Join(kubernetesDir, "overlays", e.Name()))
		}
	}
	if len(out) < 2 {
		t.Fatalf("overlays %v; want dev and production at least", out)
	}
	return out
}

func TestEveryOverlayBuildsAndPasses(t *testing.T) {
	for _, dir := range overlays(t) {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			bad, err := Dir(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range bad {
				t.Error(v)
			}
		})
	}
}

// badFixtures maps each fixture directory under testdata/bad to the rule it breaks: the first path
// element names the rule; deeper directories are more cases of it.
func badFixtures(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	root := filepath.Join("testdata", "bad")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		dir := filepath.Dir(path)
		rel, _ := filepath.Rel(root, dir)
		out[dir] = strings.Split(filepath.ToSlash(rel), "/")[0]
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// Each rule has a fixture that breaks it, and each fixture fails with its rule's violation.
func TestEveryBadFixtureFailsItsRule(t *testing.T) {
	fixtures := badFixtures(t)
	covered := map[string]bool{}
	for dir, rule := range fixtures {
		covered[rule] = true
		t.Run(strings.TrimPrefix(filepath.ToSlash(dir), "testdata/bad/"), func(t *testing.T) {
			if !slices.Contains(Rules(), rule) {
				t.Fatalf("fixture for %q, which is not a rule (Rules: %v)", rule, Rules())
			}
			bad, err := Dir(dir)
			if err != nil {
				t.Fatalf("the fixture does not build: %v", err)
			}
			if !slices.ContainsFunc(bad, func(v Violation) bool { return v.Rule == rule }) {
				t.Fatalf("no %s violation; got %v", rule, bad)
			}
			for _, v := range bad {
				t.Log(v)
			}
		})
	}
	for _, rule := range Rules() {
		if !covered[rule] {
			t.Errorf("rule %s has no bad fixture under testdata/bad/%s", rule, rule)
		}
	}
}

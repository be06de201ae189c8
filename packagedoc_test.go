package baton

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageTellsItsStory: `go doc` of every package of the library starts with what the
// package is for, not with its constants.
func TestEveryPackageTellsItsStory(t *testing.T) {
	documented := map[string]bool{} // package directory -> has a package comment
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "integration" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir := filepath.Dir(path)
		documented[dir] = documented[dir] || f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != ""
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(documented) < 10 {
		t.Fatalf("found only %d packages: the walk is broken", len(documented))
	}
	for dir, ok := range documented {
		if !ok {
			t.Errorf("package %s has no package comment: add a doc.go with its story", dir)
		}
	}
}

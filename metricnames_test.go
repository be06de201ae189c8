package baton

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestMetricNamesHaveOneSchemeAndOneHome reads every Metric* constant of the library's packages:
// each series Baton exports is named under the baton. prefix (baton_ in Prometheus), so that none
// collides with an application's own, and each name is defined in exactly one place.
func TestMetricNamesHaveOneSchemeAndOneHome(t *testing.T) {
	defined := map[string]string{} // name -> where
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			// integration/ is a module of its own and only reads the names.
			if path == "integration" || path == "testdata" || strings.HasPrefix(d.Name(), ".") && path != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Metric") || i >= len(vs.Values) {
						continue
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						continue
					}
					value, _ := strconv.Unquote(lit.Value)
					where := path + ":" + name.Name
					if !strings.HasPrefix(value, "baton.") {
						t.Errorf("%s = %q: every Baton metric is named baton.<...>", where, value)
					}
					if prev, dup := defined[value]; dup {
						t.Errorf("%q is defined twice: %s and %s", value, prev, where)
					}
					defined[value] = where
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) < 15 {
		t.Fatalf("found only %d metric names: the walk is broken (%v)", len(defined), defined)
	}
}

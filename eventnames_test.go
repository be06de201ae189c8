package baton

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/baton-run/baton/event"
)

// TestEventNamesHaveOneHome holds the event stream to one definition: every event.Kind constant is
// in event.Kinds, named baton.<component>.<what>, once; and no Go file of the repository (the
// integration module, tools and tests included) spells a name again instead of using the constant,
// so a renamed event cannot silently blind a tool.
func TestEventNamesHaveOneHome(t *testing.T) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, filepath.Join("event", "event.go"), nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	scheme := regexp.MustCompile(`^baton\.[a-z]+\.[a-z_]+$`)
	defined := map[string]string{} // value -> constant
	for _, decl := range f.Decls {
		gd, ok := decl.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" {
				continue
			}
			for i, name := range vs.Names {
				value, _ := strconv.Unquote(vs.Values[i].(*ast.BasicLit).Value)
				if !scheme.MatchString(value) {
					t.Errorf("event.%s = %q: every event is named baton.<component>.<what>", name.Name, value)
				}
				if prev, dup := defined[value]; dup {
					t.Errorf("%q is defined twice: event.%s and event.%s", value, prev, name.Name)
				}
				defined[value] = name.Name
				if !slices.Contains(event.Kinds, event.Kind(value)) {
					t.Errorf("event.%s is missing from event.Kinds", name.Name)
				}
			}
		}
	}
	if len(defined) != len(event.Kinds) || len(defined) < 10 {
		t.Fatalf("%d Kind constants, %d in event.Kinds: the parse is broken or Kinds lists a value twice", len(defined), len(event.Kinds))
	}

	err = filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			return nil
		case !strings.HasSuffix(path, ".go") || path == filepath.Join("event", "event.go"):
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, _ := strconv.Unquote(lit.Value); defined[v] != "" {
					t.Errorf("%s spells the event name %q: use event.%s", fset.Position(lit.Pos()), v, defined[v])
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

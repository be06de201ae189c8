package baton

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds a library function: one that does not fit on a screen or so is split where its
// steps are, so that a newcomer can read each step on its own.
const maxFuncLines = 80

// TestLibraryFunctionsFitOnAScreen holds every function of the library's packages (not the commands,
// examples, tests or the integration module) to maxFuncLines.
func TestLibraryFunctionsFitOnAScreen(t *testing.T) {
	fset := token.NewFileSet()
	funcs := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || path == "integration" || path == "cmd" || path == "examples") {
				return filepath.SkipDir
			}
			return nil
		case !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			funcs++
			if n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1; n > maxFuncLines {
				t.Errorf("%s: %s is %d lines, more than %d: split it where its steps are", fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if funcs < 300 {
		t.Fatalf("found only %d functions: the walk is broken", funcs)
	}
}

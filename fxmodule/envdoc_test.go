package fxmodule

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestLoadClientEnvDocNamesEveryVariable holds LoadClientEnv's go doc to the variables it reads: an
// operator reading `go doc` finds every credential and TLS setting, and a new variable cannot be
// added without it.
func TestLoadClientEnvDocNamesEveryVariable(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "clients.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "LoadClientEnv" {
			doc = fn.Doc.Text()
		}
	}
	if doc == "" {
		t.Fatal("LoadClientEnv has no doc comment")
	}
	for _, name := range ClientEnvVars() {
		if !strings.Contains(doc, name) {
			t.Errorf("LoadClientEnv's doc does not name %s", name)
		}
	}
}

package clients

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestLoadEnvDocNamesEveryVariable holds LoadEnv's go doc to the variables it reads: an
// operator reading `go doc` finds every credential and TLS setting, and a new variable cannot be
// added without it.
func TestLoadEnvDocNamesEveryVariable(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "env.go", nil, parser.ParseComments)
	if err != nil {
		t.Fatal(err)
	}
	var doc string
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Name.Name == "LoadEnv" {
			doc = fn.Doc.Text()
		}
	}
	if doc == "" {
		t.Fatal("LoadEnv has no doc comment")
	}
	for _, name := range EnvVars() {
		if !strings.Contains(doc, name) {
			t.Errorf("LoadEnv's doc does not name %s", name)
		}
	}
}

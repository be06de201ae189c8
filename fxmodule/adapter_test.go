package fxmodule

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fxmodule is the Fx adapter alone: client construction, TLS and env loading live in package
// clients. The package stays small and imports no TLS code of its own.
func TestFxmoduleIsTheAdapterAlone(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(src), "\n")
		f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); path == "crypto/tls" || path == "crypto/x509" {
				t.Errorf("%s imports %s: TLS belongs to package clients", name, path)
			}
		}
	}
	if lines >= 300 {
		t.Errorf("fxmodule has %d lines of non-test code, want under 300: what is not Fx wiring belongs elsewhere (package clients builds clients)", lines)
	}
}

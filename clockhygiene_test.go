package baton

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// wallClock is what package time offers that reads or waits on the wall clock. Library code gets all
// of it from an injected clock.Clock instead, so that a Node on a clock.Fake runs on the fake's time
// alone. time.Time, time.Duration, time.Unix and the like are values, not readings: they are fine.
var wallClock = map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "NewTimer": true,
	"NewTicker": true, "After": true, "AfterFunc": true, "Tick": true}

// seededRand is what math/rand and math/rand/v2 offer that does not draw from the global source:
// constructors of a seeded generator and their types. Everything else in those packages (rand.N,
// rand.IntN, rand.Float64, rand.Shuffle, ...) draws from the process's source, which no seed replays;
// library code draws from its clock's (clock.Jitter, clock.Around, Clock.Rand). crypto/rand is
// another matter (server IDs must be unpredictable) and is not held here.
var seededRand = map[string]bool{"New": true, "NewPCG": true, "NewChaCha8": true, "NewSource": true, "NewZipf": true,
	"Rand": true, "Source": true, "Source64": true, "PCG": true, "ChaCha8": true, "Zipf": true}

// clockExceptions are the wall-clock readings library code keeps, by "file: function: time.Func"
// (function as "Type.Method" for a method, "" outside any function), each with why no injected clock
// can stand in. An exception covers one function, not its file: a new reading beside an excused one
// is a new reading (takeover.go's excuse for one time.Until once covered a second one that needed
// none). Keep it short: a new entry needs a reason as good as these.
//
// Creating contexts with a deadline (context.WithTimeout, WithDeadline) is allowed everywhere: their
// timers are the runtime's, not a Clock's. What is left of such a deadline is read on the component's
// clock (deadline.Sub(clock.Now())), so that a test can hand it a deadline on a Fake's time.
var clockExceptions = map[string]string{
	// Certificates for tests: crypto/tls checks NotBefore/NotAfter against the wall clock.
	"internal/testcerts/testcerts.go: NewCA: time.Now":    "certificate validity is judged on the wall clock",
	"internal/testcerts/testcerts.go: CA.issue: time.Now": "certificate validity is judged on the wall clock",
}

// TestLibraryReadsTimeOnlyThroughClock holds the library to one home for time and randomness
// (package clock): no wall-clock reading or waiting from package time, and no draw from math/rand's
// global source, outside clock/ and the exceptions above.
//
// The library is every non-test .go file of this module except:
//   - clock/, the home itself (clock.Real is where the wall clock is read);
//   - cmd/ and internal/opscli/ (the operator commands cmd/baton and cmd/demo-worker share): binaries
//     run on the operator's wall clock; they use a Node's clock where they have one;
//   - testdata directories, hidden directories and nested modules (integration/, deploy/.../validate),
//     which are held by their own modules' rules.
//
// Temporal workflow code (dispatcher/workflow.go) is in scope and passes: it reads
// workflow.Now and workflow.Sleep, which replay deterministically.
func TestLibraryReadsTimeOnlyThroughClock(t *testing.T) {
	fset := token.NewFileSet()
	files, used := 0, map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || path == "clock" || path == "cmd" ||
				path == filepath.Join("internal", "opscli") || isModule(path)) {
				return filepath.SkipDir
			}
			return nil
		case !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go"):
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, hit := range clockReadings(f) {
			key := filepath.ToSlash(path) + ": " + hit.fn + ": " + hit.call
			if _, ok := clockExceptions[key]; ok {
				used[key] = true
				continue
			}
			t.Errorf("%s: %s: read time and randomness through an injected clock.Clock (Config.Clock; clock.Sleep, clock.Jitter), "+
				"or add an exception with its reason to clockExceptions", fset.Position(hit.pos), hit.call)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("found only %d files: the walk is broken", files)
	}
	for key := range clockExceptions {
		if !used[key] {
			t.Errorf("exception %q matches nothing any more: remove it", key)
		}
	}
}

type clockReading struct {
	pos  token.Pos
	fn   string // the enclosing function: "Name", "Type.Method", or "" at package level
	call string // "time.Now", "rand.N" (by package name, whatever the file calls the import)
}

// clockReadings returns f's uses of the wall clock and of math/rand's global source, calls and
// function values alike, each with its enclosing function. A dot import of time or math/rand is a
// reading too: its names (Now(), Sleep(d)) would be out of the test's sight; so is a method used on
// clock.Real() itself (clock.Real().Now()), which bypasses the injected clock as time.Now does.
// clock.Real() as a value (a default of a Config's Clock) is not a reading.
func clockReadings(f *ast.File) []clockReading {
	pkgs := map[string]string{} // local name -> "time", "rand" or "clock"
	var hits []clockReading
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		var name string
		switch p {
		case "time":
			name = "time"
		case "math/rand", "math/rand/v2":
			name = "rand"
		case "github.com/baton-run/baton/clock":
			name = "clock"
		default:
			continue
		}
		local := name
		if imp.Name != nil {
			local = imp.Name.Name
		}
		if local == "." {
			hits = append(hits, clockReading{imp.Pos(), "", "import . " + strconv.Quote(p)})
			continue
		}
		pkgs[local] = name
	}
	for _, decl := range f.Decls {
		fn := funcName(decl)
		ast.Inspect(decl, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if isRealClock(sel.X, pkgs) {
				hits = append(hits, clockReading{sel.Pos(), fn, "clock.Real()." + sel.Sel.Name})
				return true
			}
			x, ok := sel.X.(*ast.Ident)
			if !ok {
				return true
			}
			switch pkgs[x.Name] {
			case "time":
				if wallClock[sel.Sel.Name] {
					hits = append(hits, clockReading{sel.Pos(), fn, "time." + sel.Sel.Name})
				}
			case "rand":
				if !seededRand[sel.Sel.Name] {
					hits = append(hits, clockReading{sel.Pos(), fn, "rand." + sel.Sel.Name})
				}
			}
			return true
		})
	}
	return hits
}

// isRealClock reports whether x is the call clock.Real().
func isRealClock(x ast.Expr, pkgs map[string]string) bool {
	call, ok := x.(*ast.CallExpr)
	if !ok {
		return false
	}
	fun, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	id, ok := fun.X.(*ast.Ident)
	return ok && pkgs[id.Name] == "clock" && fun.Sel.Name == "Real"
}

// funcName names decl as an exception key does: "Name" for a function, "Type.Method" for a method,
// "" for anything else.
func funcName(decl ast.Decl) string {
	fd, ok := decl.(*ast.FuncDecl)
	if !ok {
		return ""
	}
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	if star, ok := t.(*ast.StarExpr); ok {
		t = star.X
	}
	switch r := t.(type) {
	case *ast.IndexExpr: // a generic receiver, T[K]
		t = r.X
	case *ast.IndexListExpr:
		t = r.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// isModule reports whether dir is the root of a nested module.
func isModule(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

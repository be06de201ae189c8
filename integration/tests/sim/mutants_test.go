package sim_test

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// mutantHeader is the first line of a mutant patch: "# test: <go test -run regexp> <package dir>"
// (scripts/sim-mutants.sh reads it).
var mutantHeader = regexp.MustCompile(`^# test: (\S+) (\S+)$`)

// Every mutant still applies to the code as it is and names a batch that exists. A change to the code
// a patch touches silently turned `make sim-mutants` red twice (a patch whose context moved no longer
// applies, and the mutant "survives"); make test now says so, and which patch, at once.
func TestMutantsApplyToTheCode(t *testing.T) {
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed to check the mutant patches: %v", err)
	}
	patches, err := filepath.Glob(filepath.Join(root, "integration/sim/mutants/*.patch"))
	if err != nil || len(patches) == 0 {
		t.Fatalf("no mutant patches under integration/sim/mutants (%v)", err)
	}
	for _, p := range patches {
		t.Run(strings.TrimSuffix(filepath.Base(p), ".patch"), func(t *testing.T) {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := bufio.NewReader(bytes.NewReader(b)).ReadLine()
			m := mutantHeader.FindSubmatch(first)
			if m == nil {
				t.Fatalf("first line %q, want \"# test: <regexp> <package dir>\"", first)
			}
			if _, err := os.Stat(filepath.Join(root, "integration", string(m[2]))); err != nil {
				t.Errorf("the batch's package %s: %v", m[2], err)
			}
			cmd := exec.Command("git", "apply", "--check", "-")
			cmd.Dir = root
			cmd.Stdin = bytes.NewReader(b[len(first)+1:])
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Errorf("the patch no longer applies to the code (regenerate it with the same bug): %v\n%s", err, out)
			}
		})
	}
}

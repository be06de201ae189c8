package temporalx

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/baton-run/baton/integration/servers/harness"
)

// EnvServerBinary names the environment variable with the path of a built tools/cmd/temporal-dev, the
// server StartServer runs. scripts/test.sh builds it once for every test package. Not BATON_*: the
// demo workers that tests start inherit the environment and refuse BATON_* settings they do not know.
const EnvServerBinary = "TEMPORALX_SERVER_BIN"

const serverPackage = "github.com/baton-run/baton/integration/tools/cmd/temporal-dev"

// serverBinary is the binary of EnvServerBinary or, without it, tools/cmd/temporal-dev of the module this
// process runs in (its working directory is in it: a test's package directory), built with
// harness.GoBuild: once per process, since the build's up-to-date check alone takes seconds.
var serverBinary = sync.OnceValues(func() (string, error) {
	if p := os.Getenv(EnvServerBinary); p != "" {
		return p, nil
	}
	// The directory of the go.mod that go finds from the working directory.
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err == nil && (mod == "" || mod == os.DevNull) {
		err = fmt.Errorf("no go.mod above the working directory (go env GOMOD: %q)", mod)
	}
	var bin string
	if err == nil {
		bin, err = harness.GoBuild(filepath.Dir(mod), serverPackage)
	}
	if err != nil {
		return "", fmt.Errorf("temporalx: build the Temporal server (%s; or set %s to a built one): %w", serverPackage, EnvServerBinary, err)
	}
	return bin, nil
})

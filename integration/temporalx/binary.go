package temporalx

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
)

// EnvServerBinary names the environment variable with the path of a built cmd/temporal-dev, the
// server StartServer runs. scripts/test.sh builds it once for every test package. Not BATON_*: the
// demo workers that tests start inherit the environment and refuse BATON_* settings they do not know.
const EnvServerBinary = "TEMPORALX_SERVER_BIN"

const serverPackage = "github.com/baton-run/baton/integration/cmd/temporal-dev"

// serverBinary is the binary of EnvServerBinary or, without it, the one this process built: once
// per process, since the build's up-to-date check alone takes seconds.
var serverBinary = sync.OnceValues(func() (string, error) {
	if p := os.Getenv(EnvServerBinary); p != "" {
		return p, nil
	}
	return buildServer()
})

// buildServer builds cmd/temporal-dev of the module this process runs in (its working directory is
// in it: a test's package directory) into the user's cache directory, one per checkout of the
// module. go build runs under a file lock, so that test packages started together build it once,
// and does nothing when the binary is up to date.
func buildServer() (string, error) {
	fail := func(err error) (string, error) {
		return "", fmt.Errorf("temporalx: build the Temporal server (%s; or set %s to a built one): %w", serverPackage, EnvServerBinary, err)
	}
	mod, err := moduleDir()
	if err != nil {
		return fail(err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return fail(err)
	}
	dir := filepath.Join(cache, "baton", fmt.Sprintf("temporal-dev-%x", sha256.Sum256([]byte(mod)))[:len("temporal-dev-")+12])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return fail(err)
	}
	defer lock.Close() // and with it the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return fail(err)
	}
	bin := filepath.Join(dir, "temporal-dev")
	cmd := exec.Command("go", "build", "-o", bin, serverPackage)
	// Its work directory next to the binary: the new binary is renamed into place, never written
	// over one that a server of another process is running.
	cmd.Dir, cmd.Env = mod, append(os.Environ(), "GOTMPDIR="+dir)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fail(fmt.Errorf("%w: %s", err, bytes.TrimSpace(out.Bytes())))
	}
	return bin, nil
}

// moduleDir is the directory of the go.mod that go finds from the working directory.
func moduleDir() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	mod := strings.TrimSpace(string(out))
	if err != nil || mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("no go.mod above the working directory (go env GOMOD: %q, %v)", mod, err)
	}
	return filepath.Dir(mod), nil
}

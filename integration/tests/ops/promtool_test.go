package ops_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/harness"
)

// promtool comes from Debian's prometheus package. When it is missing, it is installed here as root or
// with passwordless sudo (as the Makefile's deps target installs redis-server); otherwise the tests fail
// and say how to install it.
var (
	promtoolOnce sync.Once
	promtoolPath string
	promtoolErr  error
)

// installTimeout bounds apt-get (update and install together).
const installTimeout = 5 * time.Minute

func promtool(t *testing.T) string {
	t.Helper()
	promtoolOnce.Do(func() { promtoolPath, promtoolErr = findOrInstallPromtool(t) })
	if promtoolErr != nil {
		t.Fatal(promtoolErr)
	}
	return promtoolPath
}

func lookPromtool() (string, bool) {
	if p, err := exec.LookPath("promtool"); err == nil {
		return p, true
	}
	for _, p := range []string{"/usr/bin/promtool", "/usr/local/bin/promtool"} {
		if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
			return p, true
		}
	}
	return "", false
}

func findOrInstallPromtool(t *testing.T) (string, error) {
	if p, ok := lookPromtool(); ok {
		return p, nil
	}
	const manual = "promtool not found on PATH or in /usr/bin; install Debian's prometheus package " +
		"(sudo apt-get install --no-install-recommends prometheus, then sudo systemctl disable --now prometheus) " +
		"or put a promtool on PATH"
	var sudo []string
	if os.Geteuid() != 0 {
		if exec.Command("sudo", "-n", "true").Run() != nil {
			return "", errors.New(manual + " (not root and no passwordless sudo, so the test cannot install it)")
		}
		sudo = []string{"sudo", "-n"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), installTimeout)
	defer cancel()
	apt := func(args ...string) error {
		argv := append(append(append([]string{}, sudo...), "env", "DEBIAN_FRONTEND=noninteractive", "apt-get"), args...)
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %v\n%s", strings.Join(argv, " "), err, harness.Tail(out.String(), 2000))
		}
		return nil
	}
	install := []string{"install", "-y", "-qq", "--no-install-recommends", "prometheus"}
	t.Logf("promtool missing: installing Debian's prometheus package")
	start := time.Now()
	if err := apt(install...); err != nil {
		// The package lists may be missing or stale: update once and try again.
		if uerr := apt("update", "-qq"); uerr != nil {
			return "", fmt.Errorf("%s\n%v", manual, uerr)
		}
		if err := apt(install...); err != nil {
			return "", fmt.Errorf("%s\n%v", manual, err)
		}
	}
	// The package's service must not be left running (on machines where apt starts services).
	stop := append(append([]string{}, sudo...), "systemctl", "disable", "--now", "prometheus")
	_ = exec.Command(stop[0], stop[1:]...).Run()
	stop = append(append([]string{}, sudo...), "service", "prometheus", "stop")
	_ = exec.Command(stop[0], stop[1:]...).Run()
	t.Logf("installed prometheus (promtool) in %v", time.Since(start).Round(time.Second))
	if p, ok := lookPromtool(); ok {
		return p, nil
	}
	return "", errors.New(manual + " (the prometheus package was installed but promtool is still missing)")
}

// repoRoot is the root of the Baton repository (integration/tests/ops/../../..).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "deploy", "prometheus", "alerts.yml")); err != nil {
		t.Fatalf("repository root not found from %s: %v", root, err)
	}
	return root
}

func runPromtool(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool(t), args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPromtoolCheckRules(t *testing.T) {
	root := repoRoot(t)
	out := runPromtool(t, root, "check", "rules", "deploy/prometheus/alerts.yml")
	t.Log(strings.TrimSpace(out))
}

func TestPromtoolTestRules(t *testing.T) {
	root := repoRoot(t)
	// Every alert must have a firing and a non-firing case.
	rules := loadRules(t, root)
	tests := readFile(t, filepath.Join(root, "deploy", "prometheus", "alerts_test.yml"))
	for _, a := range rules.alerts() {
		if !strings.Contains(tests, "alertname: "+a.Alert+"\n") {
			t.Errorf("alerts_test.yml has no case for alert %s", a.Alert)
		}
	}
	cases := parseAlertTests(t, tests)
	for _, a := range rules.alerts() {
		c := cases[a.Alert]
		if c.firing == 0 || c.silent == 0 {
			t.Errorf("alert %s: %d firing and %d non-firing cases in alerts_test.yml; want at least one of each", a.Alert, c.firing, c.silent)
		}
	}
	out := runPromtool(t, filepath.Join(root, "deploy", "prometheus"), "test", "rules", "alerts_test.yml")
	t.Log(strings.TrimSpace(out))
}

// TestPromtoolCheckConfig checks the Prometheus configuration of docker-compose.yml. Its rule_files
// are relative to the configuration's directory, so it is checked in place.
func TestPromtoolCheckConfig(t *testing.T) {
	root := repoRoot(t)
	out := runPromtool(t, root, "check", "config", "deploy/prometheus/prometheus.yml")
	if !strings.Contains(out, "alerts.yml") {
		t.Errorf("promtool check config did not load the alert rules:\n%s", out)
	}
	t.Log(strings.TrimSpace(out))
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

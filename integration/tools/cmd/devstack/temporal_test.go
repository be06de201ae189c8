package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/stack"
	"github.com/baton-run/baton/integration/servers/temporalx"
)

// The Temporal CLI is not installed where these tests run: a shell script named temporal stands in
// for it, first on PATH. It records each invocation's arguments, one line each, answers --version as
// the CLI does, and runs startDev for `server start-dev` (with the flags parsed into its variables).
const fakeCLIScript = `#!/bin/sh
printf '%%s\n' "$*" >> '%[1]s'
if [ "$1" = --version ]; then echo '%[2]s'; exit 0; fi
[ "$1 $2" = "server start-dev" ] || { echo "unexpected command: $*" >&2; exit 2; }
shift 2
while [ $# -gt 0 ]; do
	case "$1" in
	--ip) ip=$2; shift 2;;
	--port) port=$2; shift 2;;
	--ui-port) ui_port=$2; shift 2;;
	--db-filename) db=$2; shift 2;;
	--dynamic-config-value) dynamic_config=$2; shift 2;;
	*) echo "Error: unknown flag: $1" >&2; exit 1;;
	esac
done
%[3]s
`

const cliVersionLine = "temporal version 1.5.1 (Server 1.29.1, UI 2.41.0)"

// fakeCLI writes the stand-in into a new directory, puts that first on PATH and returns the
// script's path and the file of its recorded invocations.
func fakeCLI(t *testing.T, version, startDev string) (path, record string) {
	t.Helper()
	dir := t.TempDir()
	path, record = filepath.Join(dir, "temporal"), filepath.Join(dir, "invocations")
	if err := os.WriteFile(path, fmt.Appendf(nil, fakeCLIScript, record, version, startDev), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return path, record
}

// serveWithBuiltin is a start-dev that runs Baton's own Temporal server with the CLI's settings.
func serveWithBuiltin(t *testing.T) string {
	t.Helper()
	bin := os.Getenv(temporalx.EnvServerBinary)
	if bin == "" {
		mod, err := filepath.Abs("../../..")
		if err == nil {
			bin, err = harness.GoBuild(mod, "github.com/baton-run/baton/integration/tools/cmd/temporal-dev")
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return fmt.Sprintf(`[ "$ip" = 127.0.0.1 ] || { echo "want --ip 127.0.0.1" >&2; exit 1; }
exec '%s' -db "$db" -frontend-port "$port"`, bin)
}

// startDevArgs returns the flags of the recorded `server start-dev`, which must be the last call.
func startDevArgs(t *testing.T, record string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(record)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	args := strings.Fields(lines[len(lines)-1])
	if len(args) < 2 || args[0] != "server" || args[1] != "start-dev" || len(args)%2 != 0 {
		t.Fatalf("last call of the CLI: %q, want server start-dev --flag value ...", lines[len(lines)-1])
	}
	flags := map[string]string{}
	for i := 2; i < len(args); i += 2 {
		flags[args[i]] = args[i+1]
	}
	return flags
}

func freePorts(t *testing.T, n int) []int {
	t.Helper()
	ports, err := harness.PickPorts(n)
	if err != nil {
		t.Fatal(err)
	}
	return ports
}

func TestTemporalCLIServes(t *testing.T) {
	ownServers(t)
	_, record := fakeCLI(t, cliVersionLine, serveWithBuiltin(t))
	tmp := t.TempDir()
	envFile := filepath.Join(t.TempDir(), "devstack.env")
	ports := freePorts(t, 2)
	port, redisPort := ports[0], ports[1]
	var stdout, stderr bytes.Buffer
	st, err := start(t.Context(), options{servers: stack.Options{Redis: stack.RedisInprocess, RedisPort: redisPort, Dir: tmp},
		temporal: temporalOptions{mode: temporalAuto, port: port}, envFile: envFile, stdout: &stdout, stderr: &stderr})
	if err != nil {
		t.Fatalf("start: %v\nstderr: %s", err, stderr.String())
	}
	t.Cleanup(func() { st.Close() })
	t.Logf("started:\n%s%s", stdout.String(), stderr.String())

	env := readEnvFile(t, envFile)
	if env["BATON_DEVSTACK_TEMPORAL"] != temporalCLI {
		t.Errorf("BATON_DEVSTACK_TEMPORAL=%s, want %s", env["BATON_DEVSTACK_TEMPORAL"], temporalCLI)
	}
	if want := net.JoinHostPort("127.0.0.1", strconv.Itoa(redisPort)); env["BATON_REDIS_ADDR"] != want {
		t.Errorf("BATON_REDIS_ADDR=%s, want %s (the stand-in on the port asked for)", env["BATON_REDIS_ADDR"], want)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	if env["BATON_TEMPORAL_ADDRESS"] != addr || env["BATON_TEMPORAL_NAMESPACE"] != temporalx.DefaultNamespace {
		t.Errorf("BATON_TEMPORAL_ADDRESS=%s BATON_TEMPORAL_NAMESPACE=%s, want %s and %s", env["BATON_TEMPORAL_ADDRESS"],
			env["BATON_TEMPORAL_NAMESPACE"], addr, temporalx.DefaultNamespace)
	}
	got := startDevArgs(t, record)
	dbDir, _ := filepath.Rel(tmp, filepath.Dir(got["--db-filename"]))
	if got["--ip"] != "127.0.0.1" || got["--port"] != strconv.Itoa(port) || dbDir == "" || strings.HasPrefix(dbDir, "..") ||
		env["BATON_DEVSTACK_TEMPORAL_UI"] != "http://127.0.0.1:"+got["--ui-port"] ||
		got["--dynamic-config-value"] != temporalx.CancelPollsOnShutdown+"=true" || len(got) != 5 {
		t.Errorf("server start-dev %v; want --ip 127.0.0.1, --port %d, --ui-port of BATON_DEVSTACK_TEMPORAL_UI=%s, "+
			"--db-filename in %s, --dynamic-config-value %s=true",
			got, port, env["BATON_DEVSTACK_TEMPORAL_UI"], tmp, temporalx.CancelPollsOnShutdown)
	}
	checkTemporal(t, env["BATON_TEMPORAL_ADDRESS"], env["BATON_TEMPORAL_NAMESPACE"])

	// Close stops the CLI's server (SIGTERM) and removes its database.
	if err := st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after Close", addr)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left behind in %s: %v", tmp, ents)
	}
	if _, err := os.Stat(envFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("env file still there after Close (%v)", err)
	}
}

// A CLI server that dies while devstack runs is noticed (run stops the other servers then).
func TestTemporalCLIExitIsNoticed(t *testing.T) {
	ownServers(t)
	fakeCLI(t, cliVersionLine, serveWithBuiltin(t))
	tmp := t.TempDir()
	st, err := start(t.Context(), options{servers: stack.Options{Redis: stack.RedisInprocess, Dir: tmp},
		temporal: temporalOptions{mode: temporalCLI}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	select {
	case <-st.temporalExited():
		t.Fatal("temporalExited is closed while the server runs")
	default:
	}
	pid := st.Temporal.(*cliServer).child.Pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-st.temporalExited():
	case <-time.After(10 * time.Second):
		t.Fatalf("temporalExited not closed 10 s after the server (pid %d) was killed", pid)
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close after the server died: %v", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left behind in %s: %v", tmp, ents)
	}
}

// A CLI that fails to start (here: a flag it does not know) fails the start at once, with the
// CLI's own words, and what had started is stopped.
func TestTemporalCLIFailureStopsWhatStarted(t *testing.T) {
	ownServers(t)
	path, _ := fakeCLI(t, cliVersionLine, `echo "Error: unknown flag: --frobnicate" >&2; exit 1`)
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	_, err := start(ctx, options{servers: stack.Options{Redis: stack.RedisInprocess, Dir: tmp},
		temporal: temporalOptions{mode: temporalAuto}, envFile: filepath.Join(tmp, "devstack.env")})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "unknown flag: --frobnicate") {
		t.Fatalf("start = %v; want an error naming %s and quoting its output", err, path)
	}
	if ctx.Err() != nil {
		t.Fatalf("start waited for its context to end: %v", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
		t.Errorf("left behind after a failed start: %v", ents)
	}
	// TestMain's leak check finds the etcd member if it still runs.
}

func TestResolveTemporal(t *testing.T) {
	for _, tc := range []struct {
		name     string
		version  string // of the temporal on PATH; "" for none
		o        temporalOptions
		wantMode string
		wantErr  string // names the flag
		wantWarn bool
	}{
		{"auto finds the CLI", cliVersionLine, temporalOptions{mode: temporalAuto}, temporalCLI, "", false},
		{"auto finds a CLI with news", "[notice] A new Temporal CLI release is available: 1.5.1 -> 1.6.0\n" + cliVersionLine,
			temporalOptions{mode: temporalAuto}, temporalCLI, "", false},
		{"auto without a CLI", "", temporalOptions{mode: temporalAuto}, temporalBuiltin, "", false},
		{"auto with another temporal", "temporal 0.3 (a time-series toy)", temporalOptions{mode: temporalAuto}, temporalBuiltin, "", true},
		{"builtin ignores the CLI", cliVersionLine, temporalOptions{mode: temporalBuiltin}, temporalBuiltin, "", false},
		{"cli without a CLI", "", temporalOptions{mode: temporalCLI}, "", "-temporal=cli", false},
		{"cli with another temporal", "temporal 0.3", temporalOptions{mode: temporalCLI}, "", "-temporal=cli", false},
		{"a UI without a CLI", "", temporalOptions{mode: temporalAuto, uiPort: 8233}, "", "-temporal-ui-port=8233", false},
		{"a CLI path that is not there", cliVersionLine, temporalOptions{mode: temporalAuto, cli: "/nonexistent/temporal"}, "",
			"-temporal-cli=/nonexistent/temporal", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := ""
			if tc.version != "" {
				path, _ = fakeCLI(t, tc.version, "exit 1")
			} else {
				t.Setenv("PATH", t.TempDir())
			}
			warned := false
			p, err := resolveTemporal(t.Context(), tc.o, func(string, ...any) {}, func(string, ...any) { warned = true })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || p.mode != tc.wantMode || warned != tc.wantWarn {
				t.Fatalf("resolveTemporal = %+v, %v (warned: %v); want mode %s (warned: %v)", p, err, warned, tc.wantMode, tc.wantWarn)
			}
			if p.mode == temporalCLI && (p.cli != path || p.version != cliVersionLine) {
				t.Errorf("CLI %s (%s), want %s (%s)", p.cli, p.version, path, cliVersionLine)
			}
		})
	}
}

// A port asked for that is taken fails the start before anything starts, naming the flag. The
// ports the test calls taken are held by the test itself, and none is assumed free: a port believed
// free can be taken at any moment by another package's process.
func TestPortInUse(t *testing.T) {
	ownServers(t)
	// Two adjacent ports, both held: -etcd-members=2 asks for a port and the one after it.
	first, taken := holdAdjacentPorts(t)
	fakeCLI(t, cliVersionLine, "exit 1") // never started: the ports are checked first
	notFree := func(port int) string { return fmt.Sprintf("port %d on 127.0.0.1 is not free", port) }
	for _, tc := range []struct {
		name string
		o    options
		want []string // every one in the error
	}{
		{"-temporal-port", options{temporal: temporalOptions{mode: temporalBuiltin, port: taken}}, []string{"-temporal-port", notFree(taken)}},
		{"-temporal-ui-port", options{temporal: temporalOptions{mode: temporalCLI, uiPort: taken}}, []string{"-temporal-ui-port", notFree(taken)}},
		{"-etcd-port", options{servers: stack.Options{EtcdPort: taken}}, []string{"-etcd-port", notFree(taken)}},
		{"-etcd-members=2", options{servers: stack.Options{EtcdMembers: 2, EtcdPort: first}}, []string{
			"-etcd-port=" + strconv.Itoa(first) + ": " + notFree(first),
			"-etcd-port=" + strconv.Itoa(first) + " with -etcd-members=2: member 1: " + notFree(taken)}},
		{"-redis-port", options{servers: stack.Options{RedisPort: taken}}, []string{"-redis-port", notFree(taken)}},
		{"-fixed-ports", options{servers: stack.Options{RedisPort: taken}, fixedPorts: true}, []string{"-fixed-ports (-redis-port", notFree(taken)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			tc.o.servers.Redis, tc.o.servers.Dir = stack.RedisInprocess, tmp
			tc.o.servers.EtcdMembers = max(tc.o.servers.EtcdMembers, 1)
			tc.o.temporal.mode = cmp.Or(tc.o.temporal.mode, temporalBuiltin)
			_, err := start(t.Context(), tc.o)
			for _, want := range tc.want {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("start = %v, want an error naming %q", err, want)
				}
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != 0 {
				t.Errorf("started something: %v", ents)
			}
		})
	}
}

// holdAdjacentPorts listens on two adjacent ports of 127.0.0.1 until t ends and returns them.
func holdAdjacentPorts(t *testing.T) (int, int) {
	t.Helper()
	for range 100 {
		a, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := a.Addr().(*net.TCPAddr).Port
		b, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+1)))
		if err != nil {
			a.Close()
			continue
		}
		t.Cleanup(func() { a.Close(); b.Close() })
		return port, port + 1
	}
	t.Fatal("no two adjacent ports free on 127.0.0.1 in 100 tries")
	return 0, 0
}

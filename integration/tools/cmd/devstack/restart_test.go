package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/zap"

	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/stack"
)

// A restart of the Temporal server, in both modes and through both ways of asking (the control
// socket of `devstack restart temporal`, and SIGUSR1), keeps its port and its executions, while
// etcd and Redis answer throughout.
func TestRestartTemporalKeepsPortAndExecutions(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		viaSignal  bool
		down       time.Duration
	}{
		{"builtin through the control socket, down 3s", temporalBuiltin, false, 3 * time.Second},
		{"cli through SIGUSR1", temporalCLI, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ownServers(t)
			if tc.mode == temporalCLI {
				fakeCLI(t, cliVersionLine, serveWithBuiltin(t))
			}
			tmp := t.TempDir()
			envFile := filepath.Join(t.TempDir(), "devstack.env")
			port := freePorts(t, 1)[0]
			stdout := &harness.Output{}
			ctx, cancel := context.WithCancel(t.Context())
			st, err := start(ctx, options{servers: stack.Options{Redis: stack.RedisAuto, Dir: tmp},
				temporal: temporalOptions{mode: tc.mode, port: port}, envFile: envFile, stdout: stdout, stderr: stdout})
			if err != nil {
				cancel()
				t.Fatalf("start: %v\n%s", err, stdout)
			}
			usr1 := make(chan os.Signal, 1)
			served := make(chan error, 1)
			go func() { served <- st.serve(ctx, usr1) }()
			t.Cleanup(func() {
				cancel()
				if err := <-served; err != nil {
					t.Errorf("serve: %v", err)
				}
			})
			env := readEnvFile(t, envFile)
			addr := env["BATON_TEMPORAL_ADDRESS"]
			if env[envControl] != filepath.Join(tmp, controlSocket) {
				t.Errorf("%s=%q, want the socket in the scratch dir %s", envControl, env[envControl], tmp)
			}

			runID := startIdleWorkflow(t, addr, env["BATON_TEMPORAL_NAMESPACE"], "before-restart")
			watch := watchEtcdAndRedis(t, strings.Split(env["BATON_ETCD_ENDPOINTS"], ","), env["BATON_REDIS_ADDR"])

			if tc.viaSignal {
				usr1 <- syscall.SIGUSR1
				harness.Eventually(t, 3*time.Minute, "devstack has Temporal serving again", func() error {
					if st.restarts.Load() == 0 {
						return errors.New("not yet")
					}
					return nil
				})
			} else {
				var out bytes.Buffer
				checked := false
				// Told that Temporal is kept down, the client finds the frontend's port closed.
				isDown := func() {
					checked = true
					if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
						c.Close()
						t.Errorf("%s accepts connections while Temporal is said to be down", addr)
					}
				}
				// nil: the server serves again.
				if err := requestRestart(env[envControl], tc.down, &out, isDown); err != nil {
					t.Fatalf("restart: %v\n%s", err, stdout)
				}
				if !checked {
					t.Errorf("the client was not told that Temporal is kept down:\n%s", out.String())
				}
				if st.restarts.Load() != 1 {
					t.Errorf("restarts = %d after one restart", st.restarts.Load())
				}
			}
			if failures := watch(); len(failures) > 0 {
				t.Errorf("etcd or Redis did not answer during the restart: %v", failures)
			}
			t.Logf("devstack's output:\n%s", stdout)

			if got := readEnvFile(t, envFile)["BATON_TEMPORAL_ADDRESS"]; got != addr || addr != "127.0.0.1:"+strconv.Itoa(port) {
				t.Errorf("after the restart BATON_TEMPORAL_ADDRESS=%s, want %s (the port asked for, 127.0.0.1:%d)", got, addr, port)
			}
			if st.Temporal.HostPort() != addr {
				t.Errorf("the server is at %s after the restart, was at %s", st.Temporal.HostPort(), addr)
			}
			describeRunning(t, addr, env["BATON_TEMPORAL_NAMESPACE"], "before-restart", runID)
			select {
			case err := <-served:
				t.Fatalf("serve returned after the restart: %v", err)
			default:
			}
		})
	}
}

// startIdleWorkflow starts a workflow that no worker runs (it stays running) and returns its run ID.
func startIdleWorkflow(t *testing.T, addr, namespace, id string) string {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: namespace, Logger: nopLogger{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	run, err := c.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: "devstack-restart"}, "Idle")
	if err != nil {
		t.Fatalf("start workflow: %v", err)
	}
	return run.GetRunID()
}

// describeRunning checks, with a new client, that the workflow's run is still there and running.
func describeRunning(t *testing.T, addr, namespace, id, runID string) {
	t.Helper()
	c, err := client.Dial(client.Options{HostPort: addr, Namespace: namespace, Logger: nopLogger{}})
	if err != nil {
		t.Fatalf("dial after the restart: %v", err)
	}
	defer c.Close()
	resp, err := c.DescribeWorkflowExecution(t.Context(), id, runID)
	if err != nil {
		t.Fatalf("describe %s after the restart: %v", id, err)
	}
	if s := resp.GetWorkflowExecutionInfo().GetStatus(); s != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("workflow %s is %v after the restart, want running", id, s)
	}
}

// watchEtcdAndRedis calls etcd and Redis every 50 ms until the returned stop is called, which
// returns the calls that failed.
func watchEtcdAndRedis(t *testing.T, endpoints []string, redisAddr string) (stop func() []string) {
	t.Helper()
	etcd, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	var failures []string
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if _, err := etcd.Put(ctx, "devstack/restart", strconv.Itoa(i)); err != nil {
				failures = append(failures, fmt.Sprintf("etcd put %d: %v", i, err))
			}
			if err := rdb.Set(ctx, "devstack:restart", i, 0).Err(); err != nil {
				failures = append(failures, fmt.Sprintf("redis set %d: %v", i, err))
			}
			cancel()
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	})
	return func() []string {
		close(done)
		wg.Wait()
		etcd.Close()
		rdb.Close()
		return failures
	}
}

func TestParseRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    time.Duration
		wantErr string // names the flag or says the rule
	}{
		{"temporal", []string{"temporal"}, 0, ""},
		{"down after", []string{"temporal", "-down", "3s"}, 3 * time.Second, ""},
		{"down before", []string{"-down=1m", "temporal"}, time.Minute, ""},
		{"nothing", nil, 0, "want `devstack restart temporal [-down DURATION]`"},
		{"redis", []string{"redis"}, 0, "only the Temporal server restarts"},
		{"two targets", []string{"temporal", "redis"}, 0, `unexpected arguments ["redis"]`},
		{"negative down", []string{"temporal", "-down=-1s"}, 0, "-down=-1s: want 0 or more"},
		{"not a duration", []string{"temporal", "-down=3"}, 0, "-down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseRestart(tc.args, io.Discard)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("parseRestart = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// A request the control socket cannot parse is answered with the reason, and nothing restarts.
func TestControlRefusesBadRequests(t *testing.T) {
	path := filepath.Join(t.TempDir(), controlSocket)
	c, err := listenControl(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, line := range []string{"restart redis 0s", "restart temporal -3s", "restart temporal soon"} {
		conn, err := net.Dial("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintln(conn, line)
		b, _ := io.ReadAll(conn)
		conn.Close()
		if !strings.Contains(string(b), `"Done":true`) || !strings.Contains(string(b), "request") {
			t.Errorf("%q answered %s, want an error", line, b)
		}
	}
	select {
	case req := <-c.requests:
		t.Errorf("a bad request reached serve: %+v", req)
	default:
	}
}

// The client finds the devstack by BATON_DEVSTACK_CONTROL, else as the one socket that answers
// under the temp dir; none or two is an error that says what to do.
func TestFindControl(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv(envControl, "")
	if _, err := findControl(); err == nil || !strings.Contains(err.Error(), "no running devstack found") {
		t.Fatalf("findControl with none = %v, want no running devstack found", err)
	}
	listen := func(name string) string {
		dir := filepath.Join(tmp, scratchPrefix+name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		c, err := listenControl(filepath.Join(dir, controlSocket))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.path
	}
	// A killed devstack's socket file stays and answers nothing.
	stale := listen("stale")
	first := listen("a")
	os.Remove(stale) // the listener lives on, unreachable by path
	if err := os.WriteFile(stale, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := findControl(); err != nil || got != first {
		t.Fatalf("findControl = %q, %v; want %s (the one that answers)", got, err, first)
	}
	second := listen("b")
	if _, err := findControl(); err == nil || !strings.Contains(err.Error(), "2 devstacks run") || !strings.Contains(err.Error(), envControl) {
		t.Fatalf("findControl with two = %v, want one naming both and %s", err, envControl)
	}
	t.Setenv(envControl, second)
	if got, err := findControl(); err != nil || got != second {
		t.Fatalf("findControl with %s=%s = %q, %v", envControl, second, got, err)
	}
}

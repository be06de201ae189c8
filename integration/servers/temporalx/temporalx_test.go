package temporalx

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/baton-run/baton/integration/servers/harness"
)

func TestMain(m *testing.M) {
	if os.Getenv(envOrphanTest) != "" {
		serveUntilKilled()
	}
	harness.VerifyTestMain(m)
}

// skipExternal skips tests that need a server of their own.
func skipExternal(t *testing.T) {
	t.Helper()
	if os.Getenv(EnvAddress) != "" {
		t.Skipf("%s is set: test needs a server of its own", EnvAddress)
	}
}

func greetWorkflow(ctx workflow.Context, name string) (string, error) {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	var out string
	err := workflow.ExecuteActivity(ctx, greetActivity, name).Get(ctx, &out)
	return out, err
}

func greetActivity(ctx context.Context, name string) (string, error) {
	return "Hello " + name + " from " + activity.GetInfo(ctx).ActivityType.Name, nil
}

// blockWorkflow runs until it is terminated (no worker is needed to start it).
func blockWorkflow(ctx workflow.Context) error {
	return workflow.Await(ctx, func() bool { return false })
}

// continueAsNewWorkflow continues as new n times.
func continueAsNewWorkflow(ctx workflow.Context, n int) error {
	if n > 0 {
		return workflow.NewContinueAsNewError(ctx, continueAsNewWorkflow, n-1)
	}
	return nil
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func startWorker(t *testing.T, c client.Client, taskQueue string, register func(worker.Registry)) worker.Worker {
	t.Helper()
	w := worker.New(c, taskQueue, worker.Options{})
	register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Stop)
	return w
}

func TestWorkflowRunsToCompletion(t *testing.T) {
	t0 := time.Now()
	s := Start(t, Options{})
	t.Logf("StartServer: %v (%s, namespace %q, external %v)", time.Since(t0), s.HostPort(), s.Namespace(), s.External())
	if !s.External() && !strings.HasPrefix(s.HostPort(), "127.0.0.1:") {
		t.Errorf("HostPort() = %q, want 127.0.0.1:PORT", s.HostPort())
	}
	if !s.External() && s.Namespace() != DefaultNamespace {
		t.Errorf("Namespace() = %q, want %q", s.Namespace(), DefaultNamespace)
	}
	c := Client(t, s)
	tq := "tq-" + uuid.NewString()
	startWorker(t, c, tq, func(r worker.Registry) {
		r.RegisterWorkflow(greetWorkflow)
		r.RegisterActivity(greetActivity)
	})

	ctx := ctxTimeout(t, 60*time.Second)
	t0 = time.Now()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, greetWorkflow, "baton")
	if err != nil {
		t.Fatal(err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("workflow with one activity: %v", time.Since(t0))
	if want := "Hello baton from greetActivity"; got != want {
		t.Errorf("result %q, want %q", got, want)
	}
}

// rawStartTerminateExisting starts blockWorkflow through the raw gRPC
// service, bypassing the SDK's retries (it retries ResourceExhausted).
func rawStartTerminateExisting(ctx context.Context, c client.Client, ns, id string) (string, error) {
	resp, err := c.WorkflowService().StartWorkflowExecution(ctx, &workflowservice.StartWorkflowExecutionRequest{
		Namespace:                ns,
		WorkflowId:               id,
		RequestId:                uuid.NewString(),
		WorkflowType:             &commonpb.WorkflowType{Name: "blockWorkflow"},
		TaskQueue:                &taskqueuepb.TaskQueue{Name: "nobody-polls"},
		WorkflowIdConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
	})
	return resp.GetRunId(), err
}

// TestWorkflowIDReuseMinimalInterval shows what history.workflowIdReuseMinimalInterval
// (default 1s) does in v1.32.1 and that DynamicConfig overrides reach the server.
func TestWorkflowIDReuseMinimalInterval(t *testing.T) {
	skipExternal(t)

	startTwice := func(t *testing.T, s *Server) (time.Duration, error) {
		c := Client(t, s)
		ctx := ctxTimeout(t, 30*time.Second)
		id := "reuse-" + uuid.NewString()
		t0 := time.Now()
		run1, err := rawStartTerminateExisting(ctx, c, s.Namespace(), id)
		if err != nil {
			t.Fatal(err)
		}
		run2, err := rawStartTerminateExisting(ctx, c, s.Namespace(), id)
		d := time.Since(t0)
		if err == nil && run1 == run2 {
			t.Fatalf("second start returned the same run %s", run1)
		}
		return d, err
	}

	// Production default: the interval is only checked on starts when
	// history.enableWorkflowIdReuseStartTimeValidation is on (default off).
	t.Run("default", func(t *testing.T) {
		s := Start(t, Options{})
		d, err := startTwice(t, s)
		if err != nil {
			t.Fatalf("second TERMINATE_EXISTING start %v after the first: %v", d, err)
		}
		t.Logf("two TERMINATE_EXISTING starts of one ID in %v: both succeeded", d)
	})

	// 5 s instead of the default 1 s: two starts on a loaded machine can be more than 1 s apart, and
	// the second is then rightly accepted.
	const interval = 5 * time.Second
	t.Run("validation", func(t *testing.T) {
		s := Start(t, Options{DynamicConfig: map[string]any{
			"history.enableWorkflowIdReuseStartTimeValidation": true,
			"history.workflowIdReuseMinimalInterval":           interval,
		}})
		d, err := startTwice(t, s)
		var re *serviceerror.ResourceExhausted
		if !errors.As(err, &re) {
			t.Fatalf("second start %v after the first: got %T %v, want *serviceerror.ResourceExhausted", d, err, err)
		}
		if re.Cause != enumspb.RESOURCE_EXHAUSTED_CAUSE_BUSY_WORKFLOW || !strings.HasPrefix(re.Message, "Too many restarts for workflow") {
			t.Errorf("got cause %v message %q, want BUSY_WORKFLOW \"Too many restarts for workflow ...\"", re.Cause, re.Message)
		}
		t.Logf("second start %v after the first: %T cause=%v scope=%v: %s", d, err, re.Cause, re.Scope, re.Message)

		// The SDK retries ResourceExhausted: ExecuteWorkflow waits the
		// interval out, or fails with the context's deadline.
		c := Client(t, s)
		opts := client.StartWorkflowOptions{
			ID:                       "reuse-sdk-" + uuid.NewString(),
			TaskQueue:                "nobody-polls",
			WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
		}
		if _, err := c.ExecuteWorkflow(ctxTimeout(t, 10*time.Second), opts, blockWorkflow); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		_, err = c.ExecuteWorkflow(ctxTimeout(t, 500*time.Millisecond), opts, blockWorkflow)
		var de *serviceerror.DeadlineExceeded
		if !errors.As(err, &de) {
			t.Errorf("SDK start with 500ms deadline: got %T %v, want *serviceerror.DeadlineExceeded", err, err)
		}
		t.Logf("SDK ExecuteWorkflow, 500ms deadline: %v after %v", err, time.Since(t0))
		t0 = time.Now()
		if _, err := c.ExecuteWorkflow(ctxTimeout(t, 6*interval), opts, blockWorkflow); err != nil {
			t.Errorf("SDK start with %v deadline: %v", 6*interval, err)
		}
		t.Logf("SDK ExecuteWorkflow, %v deadline: succeeded after %v (SDK retried)", 6*interval, time.Since(t0))
	})

	t.Run("validation_interval0", func(t *testing.T) {
		s := Start(t, Options{DynamicConfig: map[string]any{
			"history.enableWorkflowIdReuseStartTimeValidation": true,
			"history.workflowIdReuseMinimalInterval":           0,
		}})
		d, err := startTwice(t, s)
		if err != nil {
			t.Fatalf("second start %v after the first: %v", d, err)
		}
		if d > 100*time.Millisecond {
			t.Logf("note: the two starts took %v (> 100ms): slow machine", d)
		}
		t.Logf("two TERMINATE_EXISTING starts of one ID in %v: both succeeded", d)

		// Continue-as-new is held back to the interval even by default;
		// with 0 it is immediate.
		c := Client(t, s)
		tq := "tq-" + uuid.NewString()
		startWorker(t, c, tq, func(r worker.Registry) { r.RegisterWorkflow(continueAsNewWorkflow) })
		ctx := ctxTimeout(t, 60*time.Second)
		t0 := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, continueAsNewWorkflow, 2)
		if err != nil {
			t.Fatal(err)
		}
		firstRun := run.GetRunID() // Get follows the chain, and the run ID with it
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		t.Logf("2 continue-as-new with interval 0: %v", time.Since(t0))
		// The server's own record, not the wall clock (a loaded machine is slow either way): the held
		// back start is the new run's first workflow task backoff.
		if b := continueAsNewBackoffs(t, c, run.GetID(), firstRun); len(b) != 2 || b[0] != 0 || b[1] != 0 {
			t.Errorf("first workflow task backoffs of the continued runs with interval 0: %v, want [0s 0s]", b)
		}
	})

	t.Run("default_continue_as_new", func(t *testing.T) {
		s := Start(t, Options{})
		c := Client(t, s)
		tq := "tq-" + uuid.NewString()
		startWorker(t, c, tq, func(r worker.Registry) { r.RegisterWorkflow(continueAsNewWorkflow) })
		ctx := ctxTimeout(t, 60*time.Second)
		t0 := time.Now()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: tq}, continueAsNewWorkflow, 2)
		if err != nil {
			t.Fatal(err)
		}
		firstRun := run.GetRunID()
		if err := run.Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		d := time.Since(t0)
		t.Logf("2 continue-as-new with defaults: %v, backoffs %v", d, continueAsNewBackoffs(t, c, run.GetID(), firstRun))
		if d < 2*time.Second {
			t.Errorf("2 continue-as-new with defaults took %v, want >= 2s (1s minimal interval each)", d)
		}
	})
}

// continueAsNewBackoffs follows the chain of runs that continued as new from runID and returns, per
// continued run, the backoff of its first workflow task: how long the server held the new run back.
func continueAsNewBackoffs(t *testing.T, c client.Client, workflowID, runID string) []time.Duration {
	t.Helper()
	var backoffs []time.Duration
	for first := true; runID != ""; first = false {
		next := ""
		it := c.GetWorkflowHistory(ctxTimeout(t, 30*time.Second), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatalf("history of %s/%s: %v", workflowID, runID, err)
			}
			if a := ev.GetWorkflowExecutionStartedEventAttributes(); a != nil && !first {
				backoffs = append(backoffs, a.GetFirstWorkflowTaskBackoff().AsDuration())
			}
			if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				next = a.GetNewExecutionRunId()
			}
		}
		runID = next
	}
	return backoffs
}

// TestStopFailsClientCalls: after Stop, raw gRPC calls fail at once with
// Unavailable, SDK calls retry until their deadline, workers stop quickly.
func TestStopFailsClientCalls(t *testing.T) {
	skipExternal(t)
	s := Start(t, Options{})
	c := Client(t, s)
	tq := "tq-" + uuid.NewString()
	w := startWorker(t, c, tq, func(r worker.Registry) { r.RegisterWorkflow(blockWorkflow) })
	run, err := c.ExecuteWorkflow(ctxTimeout(t, 10*time.Second), client.StartWorkflowOptions{TaskQueue: tq}, blockWorkflow)
	if err != nil {
		t.Fatal(err)
	}

	t0 := time.Now()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Stop: %v", time.Since(t0))
	if err := s.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}

	// Raw gRPC (no SDK retries): Unavailable at once.
	t0 = time.Now()
	_, err = c.WorkflowService().GetSystemInfo(ctxTimeout(t, 5*time.Second), &workflowservice.GetSystemInfoRequest{})
	var un *serviceerror.Unavailable
	if !errors.As(err, &un) {
		t.Errorf("raw GetSystemInfo after Stop: got %T %v, want *serviceerror.Unavailable", err, err)
	}
	t.Logf("raw GetSystemInfo after Stop: %T after %v: %v", err, time.Since(t0), err)

	// SDK calls retry Unavailable until the deadline (half the context's
	// remaining time, at least 1s, per attempt series; 10s without deadline).
	t0 = time.Now()
	_, err = c.DescribeWorkflowExecution(ctxTimeout(t, 3*time.Second), run.GetID(), "")
	d := time.Since(t0)
	var de *serviceerror.DeadlineExceeded
	if !errors.As(err, &de) && !errors.As(err, &un) {
		t.Errorf("SDK DescribeWorkflowExecution after Stop: got %T %v, want DeadlineExceeded or Unavailable", err, err)
	}
	if d > 5*time.Second {
		t.Errorf("SDK DescribeWorkflowExecution after Stop took %v, want <= 5s", d)
	}
	t.Logf("SDK DescribeWorkflowExecution (3s ctx) after Stop: %T after %v: %v", err, d, err)

	// run.Get long-polls and retries: it returns only at its context's deadline.
	t0 = time.Now()
	err = run.Get(ctxTimeout(t, 2*time.Second), nil)
	if err == nil {
		t.Error("run.Get after Stop succeeded")
	}
	t.Logf("run.Get (2s ctx) after Stop: %T after %v: %v", err, time.Since(t0), err)

	// Dial checks the connection: fails at once.
	t0 = time.Now()
	if c2, err := s.NewClient(); err == nil {
		c2.Close()
		t.Error("NewClient after Stop succeeded")
	} else {
		t.Logf("NewClient after Stop: %v after %v", err, time.Since(t0))
	}

	t0 = time.Now()
	w.Stop()
	d = time.Since(t0)
	t.Logf("worker.Stop after server Stop: %v", d)
	if d > 10*time.Second {
		t.Errorf("worker.Stop after server Stop took %v", d)
	}
	// The still running workflow stays in the SDK's (process-wide) sticky
	// cache, its coroutine goroutine blocked, until the cache is purged.
	worker.PurgeStickyWorkflowCache()
	if err := s.Close(); err != nil {
		t.Errorf("Close after Stop: %v", err)
	}
}

func TestVisibility(t *testing.T) {
	s := Start(t, Options{})
	c := Client(t, s)
	ctx := ctxTimeout(t, 120*time.Second)
	listRunning := func(id string) int {
		t.Helper()
		resp, err := c.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
			Namespace: s.Namespace(),
			Query:     fmt.Sprintf(`WorkflowId = %q AND ExecutionStatus = "Running"`, id),
		})
		if err != nil {
			t.Fatal(err)
		}
		return len(resp.GetExecutions())
	}
	// waitFor polls until listRunning(id) == want; it returns the time it
	// took and whether the first query already saw it.
	waitFor := func(id string, want int) (time.Duration, bool) {
		t.Helper()
		t0 := time.Now()
		for i := 0; ; i++ {
			if listRunning(id) == want {
				return time.Since(t0), i == 0
			}
			if time.Since(t0) > 30*time.Second {
				t.Fatalf("ListWorkflow(%s running) != %d after 30s", id, want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	const n = 10
	var startLat, termLat []time.Duration
	startFirst, termFirst := 0, 0
	ids := make([]string, n)
	for i := range ids {
		ids[i] = "vis-" + uuid.NewString()
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: ids[i], TaskQueue: "nobody-polls"}, blockWorkflow)
		if err != nil {
			t.Fatal(err)
		}
		d, first := waitFor(ids[i], 1)
		startLat = append(startLat, d)
		if first {
			startFirst++
		}
		if i%2 == 1 {
			continue // left running for CountWorkflow
		}
		if err := c.TerminateWorkflow(ctx, ids[i], run.GetRunID(), "test"); err != nil {
			t.Fatal(err)
		}
		d, first = waitFor(ids[i], 0)
		termLat = append(termLat, d)
		if first {
			termFirst++
		}
	}
	t.Logf("Running visible after start: first query saw it %d/%d, latency %s", startFirst, n, durStats(startLat))
	t.Logf("gone from Running after terminate: first query %d/%d, latency %s", termFirst, len(termLat), durStats(termLat))

	count := func(q string) int64 {
		t.Helper()
		resp, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: s.Namespace(), Query: q})
		if err != nil {
			t.Fatalf("CountWorkflow(%q): %v", q, err)
		}
		return resp.GetCount()
	}
	ors := make([]string, n)
	for i, id := range ids {
		ors[i] = fmt.Sprintf("WorkflowId = %q", id)
	}
	mine := "(" + strings.Join(ors, " OR ") + ")"
	if got := count(mine + ` AND ExecutionStatus = "Running"`); got != n/2 {
		t.Errorf("CountWorkflow running = %d, want %d", got, n/2)
	}
	if got := count(mine + ` AND ExecutionStatus = "Terminated"`); got != n/2 {
		t.Errorf("CountWorkflow terminated = %d, want %d", got, n/2)
	}
	if got := count(mine); got != n {
		t.Errorf("CountWorkflow = %d, want %d", got, n)
	}
}

func durStats(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return fmt.Sprintf("min %v median %v max %v", s[0].Round(time.Millisecond), s[len(s)/2].Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond))
}

// TestSeveralServers: two servers at once, then one more after both are closed.
func TestSeveralServers(t *testing.T) {
	skipExternal(t)
	servers := make([]*Server, 2)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range servers {
		wg.Go(func() {
			s, err := StartServer(Options{Namespace: fmt.Sprintf("ns%d", i)})
			if err != nil {
				t.Error(err)
				return
			}
			servers[i] = s
		})
	}
	wg.Wait()
	t.Logf("two servers started concurrently: %v", time.Since(t0))
	for _, s := range servers {
		if s != nil {
			defer s.Close()
		}
	}
	if t.Failed() {
		return
	}
	if servers[0].HostPort() == servers[1].HostPort() {
		t.Fatalf("both servers on %s", servers[0].HostPort())
	}
	ping := func(s *Server) {
		t.Helper()
		c, err := s.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := ctxTimeout(t, time.Minute) // a fresh server on a loaded machine answers its first start late
		if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "nobody-polls"}, blockWorkflow); err != nil {
			t.Fatalf("%s/%s: %v", s.HostPort(), s.Namespace(), err)
		}
	}
	ping(servers[0])
	ping(servers[1])
	t0 = time.Now()
	if err := servers[0].Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close: %v", time.Since(t0))
	ping(servers[1])
	if err := servers[1].Close(); err != nil {
		t.Fatal(err)
	}
	if err := servers[1].Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}

	t0 = time.Now()
	s3 := Start(t, Options{})
	t.Logf("third server after two were closed: started in %v", time.Since(t0))
	ping(s3)
}

// TestExternal points BATON_TEMPORAL_ADDRESS at a server of temporalx.
func TestExternal(t *testing.T) {
	skipExternal(t)
	s := Start(t, Options{Namespace: "ext"})
	t.Setenv(EnvAddress, s.HostPort())
	t.Setenv(EnvNamespace, "ext2") // registered by StartServer
	e := Start(t, Options{Namespace: "ignored"})
	if !e.External() || e.HostPort() != s.HostPort() || e.Namespace() != "ext2" {
		t.Fatalf("external: External()=%v HostPort()=%q Namespace()=%q", e.External(), e.HostPort(), e.Namespace())
	}
	if err := e.Stop(); !errors.Is(err, ErrExternal) {
		t.Errorf("Stop of external: %v, want ErrExternal", err)
	}
	c := Client(t, e)
	if _, err := c.ExecuteWorkflow(ctxTimeout(t, 10*time.Second), client.StartWorkflowOptions{TaskQueue: "nobody-polls"}, blockWorkflow); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRestartKeepsData: a killed server started again is the same server, on the same address with
// the same executions (the drill's restart fault relies on it).
func TestRestartKeepsData(t *testing.T) {
	skipExternal(t)
	s := Start(t, Options{})
	c := Client(t, s)
	run, err := c.ExecuteWorkflow(ctxTimeout(t, 30*time.Second), client.StartWorkflowOptions{TaskQueue: "nobody-polls"}, blockWorkflow)
	if err != nil {
		t.Fatal(err)
	}
	addr := s.HostPort()
	if err := s.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(ctxTimeout(t, 2*DefaultTimeout)); err != nil {
		t.Fatal(err)
	}
	if s.HostPort() != addr {
		t.Errorf("restarted on %s, was %s", s.HostPort(), addr)
	}
	c2 := Client(t, s)
	d, err := c2.DescribeWorkflowExecution(ctxTimeout(t, 30*time.Second), run.GetID(), run.GetRunID())
	if err != nil {
		t.Fatalf("the run started before the crash: %v", err)
	}
	if st := d.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Errorf("the run started before the crash is %v, want running", st)
	}
}

// envOrphanTest makes the test binary a starter that serves until it is killed (TestServerDiesWithStarter).
const envOrphanTest = "TEMPORALX_TEST_STARTER"

func serveUntilKilled() {
	s, err := StartServer(Options{})
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	fmt.Println(s.child.Pid())
	select {}
}

// TestServerDiesWithStarter: a starter killed with SIGKILL (a test run killed at its timeout, a
// Ctrl-C'd go test) leaves no server behind.
func TestServerDiesWithStarter(t *testing.T) {
	skipExternal(t)
	bin, err := serverBinary() // built here, so that the starter's StartServer does not count it
	if err != nil {
		t.Fatal(err)
	}
	starter := exec.Command(os.Args[0], "-test.run=^$")
	starter.Env = append(os.Environ(), envOrphanTest+"=1", EnvServerBinary+"="+bin)
	out, err := starter.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := starter.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	pid, perr := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || perr != nil {
		_ = starter.Process.Kill()
		_ = starter.Wait()
		t.Fatalf("starter said %q (%v)", line, err)
	}
	_ = starter.Process.Kill()
	_ = starter.Wait()
	harness.Eventually(t, 30*time.Second, "the server process ends with its starter", func() error {
		// A zombie (exited, reaped by nobody yet) counts as ended.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(b), ") Z ") {
			return nil
		}
		return fmt.Errorf("server %d still running", pid)
	})
}

// Command demo is `make demo`: Baton as its users run it, on one machine. It starts the dev servers
// (real etcd and a real Temporal server in-process, and Redis) with devstack, three demo-worker
// processes over four queues, shows who leads what, kills the leader of one queue and shows the
// takeover, stops the leader of another queue gracefully and shows the handover, and shuts
// everything down, explaining each step in plain words. `make demo` builds the two binaries and
// passes their directory with -bin.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/integration/workerproc"
)

const project = "demo"

var queues = []string{"orders", "payments", "refunds", "invoices"}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "\ndemo failed:", err)
		os.Exit(1)
	}
}

type options struct {
	bin     string
	workDir string
	workers int
}

func run() error {
	var o options
	flag.StringVar(&o.bin, "bin", "", "directory holding the demo-worker and devstack binaries (make demo builds them)")
	flag.StringVar(&o.workDir, "dir", "", "directory for logs and the env file (default: a new temporary directory)")
	flag.IntVar(&o.workers, "workers", 3, "demo workers to run")
	flag.Parse()
	if o.bin == "" {
		return errors.New("-bin is required: run `make demo`")
	}
	if o.workDir == "" {
		d, err := os.MkdirTemp("", "baton-demo-")
		if err != nil {
			return err
		}
		o.workDir = d
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	started := time.Now()
	d := &demo{o: o, started: started}
	defer d.shutdown()
	if err := d.script(ctx); err != nil {
		return err
	}
	d.shutdown()
	say("")
	say("Done in %v. Logs of every process are in %s.", time.Since(started).Round(time.Second), o.workDir)
	return nil
}

type demo struct {
	o           options
	started     time.Time
	stack       *exec.Cmd
	stackExited chan error
	env         map[string]string
	tc          client.Client
	workers     []*workerproc.Proc
	gen         int
	closed      bool
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func (d *demo) step(format string, args ...any) {
	fmt.Printf("\n[%5.1fs] %s\n", time.Since(d.started).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) script(ctx context.Context) error {
	d.step("Starting the dev servers: etcd (embedded), Temporal (in-process) and Redis, on loopback.")
	if err := d.startStack(ctx); err != nil {
		return err
	}
	if d.env["BATON_DEVSTACK_REDIS"] == "inprocess" {
		say("  NOTICE: redis-server is not installed here, so Redis is an in-process stand-in (miniredis).")
	}
	say("  etcd %s, Temporal %s, Redis %s", d.env["BATON_ETCD_ENDPOINTS"], d.env["BATON_TEMPORAL_ADDRESS"], d.env["BATON_REDIS_ADDR"])
	tc, err := client.Dial(client.Options{HostPort: d.env["BATON_TEMPORAL_ADDRESS"], Namespace: d.env["BATON_TEMPORAL_NAMESPACE"],
		Logger: quietLogger{}})
	if err != nil {
		return fmt.Errorf("temporal client: %w", err)
	}
	d.tc = tc

	d.step("Starting %d demo workers. Each campaigns in an etcd election for every queue: %s.", d.o.workers, strings.Join(queues, ", "))
	say("  The winner of a queue terminates any earlier dispatcher run and starts its own workflow %q.", "dispatcher-"+project+"-<queue>")
	for i := 1; i <= d.o.workers; i++ {
		if _, err := d.startWorker(fmt.Sprintf("worker-%d", i)); err != nil {
			return err
		}
	}
	if err := d.waitAllLed(ctx, 60*time.Second); err != nil {
		return err
	}
	d.step("Every queue has exactly one leader, and each leader runs that queue's dispatcher:")
	d.table()
	d.step("The operator's view, `demo-worker status`, read straight from etcd, Temporal and Redis:")
	d.statusCommand(ctx)

	// A crash, with requests flowing.
	load, err := d.startLoad("orders")
	if err != nil {
		return err
	}
	victim, qs := d.leaderOf("orders")
	d.step("Crash: killing %s (SIGKILL), the leader of orders. It gets no chance to clean up.", victim.ID)
	say("  Its etcd lease now runs out (TTL %s); until then nobody else may lead its queues.", d.env["BATON_ELECTION_TTL"])
	killed := time.Now()
	victim.Signal(syscall.SIGKILL)
	<-victim.Done()
	next, nqs, err := d.waitNewLeader(ctx, "orders", victim, 30*time.Second)
	if err != nil {
		return err
	}
	say("  %s took over orders %v after the kill (takeover itself: %v from winning to the new run open).",
		next.ID, time.Since(killed).Round(time.Millisecond), nqs.TakeoverLatency.Round(time.Millisecond))
	d.explainRun(ctx, nqs.WorkflowID, qs.RunID, "the crashed leader's run")
	d.explainRun(ctx, nqs.WorkflowID, nqs.RunID, "the new run")
	say("  Requests to orders through the crash (demo-worker load -mode dispatch, read back from the ledger):")
	say("  %s", summary(load))

	// A graceful stop.
	if err := d.waitAllLed(ctx, 30*time.Second); err != nil {
		return err
	}
	leaving, lqs := d.leaderOf("payments")
	d.step("Rolling restart: stopping %s (SIGTERM), the leader of payments.", leaving.ID)
	say("  It resigns every term first, ending its own dispatcher runs, so a follower wins at once.")
	stopped := time.Now()
	leaving.Signal(syscall.SIGTERM)
	next, nqs, err = d.waitNewLeader(ctx, "payments", leaving, 30*time.Second)
	if err != nil {
		return err
	}
	say("  %s took over payments %v after the SIGTERM.", next.ID, time.Since(stopped).Round(time.Millisecond))
	select {
	case <-leaving.Done():
		say("  %s exited with code %d.", leaving.ID, leaving.Code())
	case <-time.After(20 * time.Second):
		return fmt.Errorf("%s did not exit after SIGTERM", leaving.ID)
	}
	d.explainRun(ctx, nqs.WorkflowID, lqs.RunID, "the stopped leader's run")
	d.explainRun(ctx, nqs.WorkflowID, nqs.RunID, "the new run")

	d.step("Both stopped workers come back, as a deployment would bring them back; they join as followers.")
	for _, id := range []string{victim.ID, leaving.ID} {
		d.gen++
		if _, err := d.startWorker(fmt.Sprintf("%s-r%d", id, d.gen)); err != nil {
			return err
		}
	}
	if err := d.waitAllLed(ctx, 30*time.Second); err != nil {
		return err
	}
	time.Sleep(time.Second)
	d.table()
	d.step("What happened, in short:")
	say("  - One leader per queue at every moment, decided by etcd; every action of a leader is fenced by its token.")
	say("  - A crashed leader was replaced once its lease ran out; its dispatcher run was terminated by its exact run ID.")
	say("  - A stopped leader handed over within milliseconds, ending its own run first.")
	say("  - Each queue ends with exactly one dispatcher run open.")
	return nil
}

func (d *demo) startStack(ctx context.Context) error {
	envFile := filepath.Join(d.o.workDir, "devstack.env")
	_ = os.Remove(envFile)
	logf, err := os.Create(filepath.Join(d.o.workDir, "devstack.log"))
	if err != nil {
		return err
	}
	d.stack = exec.Command(filepath.Join(d.o.bin, "devstack"), "-env-file", envFile, "-quiet")
	d.stack.Stdout, d.stack.Stderr = logf, logf
	d.stack.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := d.stack.Start(); err != nil {
		return fmt.Errorf("start devstack: %w", err)
	}
	exited := make(chan error, 1)
	d.stackExited = exited
	go func() { exited <- d.stack.Wait(); close(exited) }()
	for {
		if data, err := os.ReadFile(envFile); err == nil {
			d.env = parseEnv(string(data))
			d.env["BATON_ELECTION_TTL"] = "3s"
			return nil
		}
		select {
		case err := <-exited:
			d.stack = nil
			log, _ := os.ReadFile(logf.Name())
			return fmt.Errorf("devstack exited before it was ready: %v\n%s", err, log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func parseEnv(s string) map[string]string {
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if k, v, ok := strings.Cut(strings.TrimSpace(sc.Text()), "="); ok && strings.HasPrefix(k, "BATON_") {
			env[k] = strings.Trim(v, `'"`)
		}
	}
	return env
}

// workerEnv is what a demo-worker process needs beside this process's environment.
func (d *demo) workerEnv() []string {
	var env []string
	for _, k := range []string{"BATON_ETCD_ENDPOINTS", "BATON_TEMPORAL_ADDRESS", "BATON_TEMPORAL_NAMESPACE", "BATON_REDIS_ADDR", "BATON_ELECTION_TTL"} {
		env = append(env, k+"="+d.env[k])
	}
	return append(env, "BATON_PROJECT="+project, "BATON_QUEUES="+strings.Join(queues, ","),
		"BATON_HEARTBEAT_INTERVAL=1s", "BATON_RECONCILE_INTERVAL=5s", "BATON_RECONCILE_STALE_AFTER=3s",
		"BATON_REGISTRY_HEARTBEAT_INTERVAL=1s")
}

// startLoad sends dispatch requests to queue for 10 s with the Producer, which returns each once it
// is handled, so the final line tells whether any was lost in the takeover.
func (d *demo) startLoad(queue string) (*workerproc.Proc, error) {
	p, err := workerproc.StartLoad(filepath.Join(d.o.bin, "demo-worker"), "load", d.workerEnv(), "-mode=dispatch",
		"-queues="+queue, "-rate=10", "-duration=10s", "-interval=1h")
	if err != nil {
		return nil, fmt.Errorf("start demo-worker load: %w", err)
	}
	d.workers = append(d.workers, p)
	return p, nil
}

// summary waits for the load to finish and returns its final line (the JSON lines are its logs).
func summary(load *workerproc.Proc) string {
	<-load.Done()
	lines := strings.Split(strings.TrimSpace(load.Output()), "\n")
	for i := len(lines) - 1; i > 0 && strings.HasPrefix(lines[i], "{"); i-- {
		lines = lines[:i]
	}
	return lines[len(lines)-1]
}

func (d *demo) startWorker(id string) (*workerproc.Proc, error) {
	p, err := workerproc.Start(filepath.Join(d.o.bin, "demo-worker"), id, d.workerEnv())
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", id, err)
	}
	d.workers = append(d.workers, p)
	say("  %s started (status on http://%s/status)", id, p.Addr)
	return p, nil
}

// leaderOf returns the live worker that leads queue with a dispatcher run.
func (d *demo) leaderOf(queue string) (*workerproc.Proc, baton.QueueStatus) {
	for _, w := range d.workers {
		if w.Exited() || w.Addr == "" {
			continue
		}
		if st, ok := workerproc.Status(w.Addr); ok {
			if q, ok := workerproc.Leading(st, queue); ok {
				return w, q
			}
		}
	}
	return nil, baton.QueueStatus{}
}

func (d *demo) waitAllLed(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		missing := slices.DeleteFunc(slices.Clone(queues), func(q string) bool { w, _ := d.leaderOf(q); return w != nil })
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queues without a leader after %v: %v (see the logs in %s)", timeout, missing, d.o.workDir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (d *demo) waitNewLeader(ctx context.Context, queue string, old *workerproc.Proc, timeout time.Duration) (*workerproc.Proc, baton.QueueStatus, error) {
	deadline := time.Now().Add(timeout)
	for {
		if w, qs := d.leaderOf(queue); w != nil && w != old {
			return w, qs, nil
		}
		if time.Now().After(deadline) {
			return nil, baton.QueueStatus{}, fmt.Errorf("%s: no new leader within %v", queue, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, baton.QueueStatus{}, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (d *demo) table() {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  QUEUE\tLEADER\tTOKEN\tDISPATCHER RUN\tLEADING FOR\tTAKEOVER")
	for _, q := range queues {
		w, qs := d.leaderOf(q)
		if w == nil {
			fmt.Fprintf(tw, "  %s\t(none)\t\t\t\t\n", q)
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%d\t%s\t%v\t%v\n", q, w.ID, qs.Token, short(qs.RunID),
			time.Since(qs.Since).Round(100*time.Millisecond), qs.TakeoverLatency.Round(time.Millisecond))
	}
	tw.Flush()
}

func (d *demo) statusCommand(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, filepath.Join(d.o.bin, "demo-worker"), "status")
	cmd.Env = append(os.Environ(), d.workerEnv()...)
	out, err := cmd.CombinedOutput()
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		say("  %s", line)
	}
	if err != nil {
		say("  (demo-worker status: %v)", err)
	}
}

// explainRun prints a run's status and, for a terminated run, the termination reason from its
// history.
func (d *demo) explainRun(ctx context.Context, workflowID, runID, what string) {
	resp, err := d.tc.DescribeWorkflowExecution(ctx, workflowID, runID)
	if err != nil {
		say("  %s %s: %v", what, short(runID), err)
		return
	}
	info := resp.GetWorkflowExecutionInfo()
	line := fmt.Sprintf("  %s %s: %s", what, short(runID), strings.TrimPrefix(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
	if info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		iter := d.tc.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_CLOSE_EVENT)
		if iter.HasNext() {
			if ev, err := iter.Next(); err == nil {
				line += fmt.Sprintf(" (%q)", ev.GetWorkflowExecutionTerminatedEventAttributes().GetReason())
			}
		}
	}
	say("%s", line)
}

func short(runID string) string { return runID[max(0, len(runID)-12):] }

// shutdown stops the workers gracefully, then the servers; it runs once.
func (d *demo) shutdown() {
	if d.closed {
		return
	}
	d.closed = true
	if len(d.workers) > 0 {
		d.step("Shutting down: SIGTERM to every worker, then the dev servers.")
	}
	for _, w := range d.workers {
		w.Signal(syscall.SIGTERM)
	}
	for _, w := range d.workers {
		select {
		case <-w.Done():
		case <-time.After(20 * time.Second):
			w.Kill()
		}
		if err := os.WriteFile(filepath.Join(d.o.workDir, w.ID+".log"), []byte(w.Output()), 0o644); err != nil {
			say("  %s log: %v", w.ID, err)
		}
	}
	if d.tc != nil {
		d.tc.Close()
	}
	if d.stack != nil && d.stack.Process != nil {
		_ = d.stack.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.stackExited:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-d.stack.Process.Pid, syscall.SIGKILL)
			<-d.stackExited
		}
	}
}

// quietLogger keeps the SDK client's logs out of the story.
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// Command demo is `make demo`: Baton as its users run it, on one machine. It starts the dev servers
// (package stack: real etcd in this process, a real Temporal server in a child process, and Redis),
// three demo-worker processes over four queues, shows who leads what, kills the leader of one queue
// and shows the takeover, stops the leader of another queue gracefully and shows the handover, and
// shuts everything down, explaining each step in plain words. `make demo` builds demo-worker and
// passes its directory with -bin, and builds the Temporal server for temporalx (TEMPORALX_SERVER_BIN).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
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
	sdklog "go.temporal.io/sdk/log"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/stack"
	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/takeover"
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
	flag.StringVar(&o.bin, "bin", "", "directory holding the demo-worker binary (make demo builds it)")
	flag.StringVar(&o.workDir, "dir", "", "directory for the logs (default: a new temporary directory)")
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
	d := &demo{o: o, started: time.Now()}
	defer d.shutdown()
	if err := d.script(ctx); err != nil {
		return err
	}
	d.shutdown()
	say("")
	say("Done in %v. Logs of every process are in %s.", time.Since(d.started).Round(time.Second), o.workDir)
	return nil
}

type demo struct {
	o       options
	started time.Time
	stack   *stack.Stack
	env     map[string]string
	tc      client.Client
	workers []*workerproc.Proc
	closed  bool
}

func say(format string, args ...any) { fmt.Printf(format+"\n", args...) }

func (d *demo) step(format string, args ...any) {
	fmt.Printf("\n[%5.1fs] %s\n", time.Since(d.started).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) script(ctx context.Context) error {
	d.step("Starting the dev servers: etcd (embedded), Temporal (a child process) and Redis, on loopback.")
	st, err := stack.Start(ctx, stack.Options{Dir: d.o.workDir,
		Warn: func(format string, args ...any) { say("  "+format, args...) }})
	if err != nil {
		return err
	}
	d.stack = st
	d.env = map[string]string{"BATON_ELECTION_TTL": "3s"}
	for _, v := range st.Env() {
		d.env[v.Name] = v.Value
	}
	say("  etcd %s, Temporal %s, Redis %s", d.env["BATON_ETCD_ENDPOINTS"], d.env["BATON_TEMPORAL_ADDRESS"], d.env["BATON_REDIS_ADDR"])
	tc, err := client.Dial(client.Options{HostPort: st.Temporal.HostPort(), Namespace: st.Temporal.Namespace(),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
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
	<-load.Done()
	s, ok := load.Summary()
	if !ok || s.Ledger == nil {
		return fmt.Errorf("the load printed no final summary: %s", load.Tail(800))
	}
	say("  sent %d, handled %d (Dispatch returned), not handled %d, handled twice %d, per the ledger", s.Sent, s.Ledger.Handled,
		s.Ledger.NotHandled, s.Ledger.HandledTwice)
	if s.Sent == 0 || s.Ledger.NotHandled > 0 {
		return fmt.Errorf("requests to orders across the crash: %d sent, %d not handled (see the logs in %s)", s.Sent,
			s.Ledger.NotHandled, d.o.workDir)
	}

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
	for i, id := range []string{victim.ID, leaving.ID} {
		if _, err := d.startWorker(fmt.Sprintf("%s-r%d", id, i+1)); err != nil {
			return err
		}
	}
	if err := d.waitAllLed(ctx, 30*time.Second); err != nil {
		return err
	}
	time.Sleep(time.Second)
	d.table()
	if err := d.verifyOwners(ctx); err != nil {
		return err
	}
	d.step("What happened, in short:")
	say("  - One leader per queue at every moment, decided by etcd; every action of a leader is fenced by its token.")
	say("  - A crashed leader was replaced once its lease ran out; its dispatcher run was terminated by its exact run ID.")
	say("  - A stopped leader handed over within milliseconds, ending its own run first.")
	say("  - Each queue ends with exactly one dispatcher run open.")
	return nil
}

// verifyOwners checks, from Temporal's side, that each queue's open dispatcher run is its leader's:
// the same run ID, and the leader's fencing token in the run's memo. Temporal never shows two running
// runs of one ID, so what proves one owner is that the open run is the leader's own. A queue that
// the balancer is moving to a returning worker disagrees for a moment: the check is retried, and only
// a disagreement that lasts fails the demo.
func (d *demo) verifyOwners(ctx context.Context) error {
	if err := harness.Poll(ctx, 15*time.Second, 100*time.Millisecond, func() error { return d.ownersAgree(ctx) }); err != nil {
		return fmt.Errorf("%w (see the logs in %s)", err, d.o.workDir)
	}
	say("  Checked in Temporal: each queue's open run is its leader's (same run ID, the leader's token in its memo).")
	return nil
}

func (d *demo) ownersAgree(ctx context.Context) error {
	for _, q := range queues {
		w, qs := d.leaderOf(q)
		if w == nil {
			return fmt.Errorf("%s has no leader at the end", q)
		}
		resp, err := d.tc.DescribeWorkflowExecution(ctx, qs.WorkflowID, "")
		if err != nil {
			return fmt.Errorf("%s: describe %s: %w", q, qs.WorkflowID, err)
		}
		info := resp.GetWorkflowExecutionInfo()
		owner, found, err := takeover.DecodeOwner(nil, info.GetMemo())
		switch {
		case err != nil || !found:
			return fmt.Errorf("%s: the open run %s carries no owner in its memo (%v)", q, info.GetExecution().GetRunId(), err)
		case info.GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			return fmt.Errorf("%s: the current run %s is %v, not running", q, info.GetExecution().GetRunId(), info.GetStatus())
		case info.GetExecution().GetRunId() != qs.RunID || owner.Token != qs.Token:
			return fmt.Errorf("%s: the open run is %s with token %d, but its leader %s holds run %s with token %d", q,
				info.GetExecution().GetRunId(), owner.Token, w.ID, qs.RunID, qs.Token)
		}
	}
	return nil
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
	p, err := workerproc.Start(workerproc.Options{Load: true}, filepath.Join(d.o.bin, "demo-worker"), "load", d.workerEnv(), "-mode=dispatch",
		"-queues="+queue, "-rate=10", "-duration=10s", "-interval=1h")
	if err != nil {
		return nil, fmt.Errorf("start demo-worker load: %w", err)
	}
	d.workers = append(d.workers, p)
	return p, nil
}

func (d *demo) startWorker(id string) (*workerproc.Proc, error) {
	p, err := workerproc.Start(workerproc.Options{}, filepath.Join(d.o.bin, "demo-worker"), id, d.workerEnv())
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
	err := harness.Poll(ctx, timeout, 50*time.Millisecond, func() error {
		if missing := slices.DeleteFunc(slices.Clone(queues), func(q string) bool { w, _ := d.leaderOf(q); return w != nil }); len(missing) > 0 {
			return fmt.Errorf("queues without a leader: %v", missing)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w (see the logs in %s)", err, d.o.workDir)
	}
	return nil
}

func (d *demo) waitNewLeader(ctx context.Context, queue string, old *workerproc.Proc, timeout time.Duration) (w *workerproc.Proc, qs baton.QueueStatus, err error) {
	err = harness.Poll(ctx, timeout, 10*time.Millisecond, func() error {
		if w, qs = d.leaderOf(queue); w == nil || w == old {
			return fmt.Errorf("%s: no new leader", queue)
		}
		return nil
	})
	return w, qs, err
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
	if d.stack != nil {
		if err := d.stack.Close(); err != nil {
			say("  stopping the dev servers: %v", err)
		}
	}
}

package e2e_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"

	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/takeover"
)

// The bounds of a non-leader's crash, well below what Temporal's and the SDK's defaults cost (a
// held workflow task waited 10 s, a sticky one 5 s) and loose enough for a loaded machine: the
// dispatcher runs' workflow task timeout (takeover.DefaultWorkflowTaskTimeout, 2 s) and the
// workers' sticky timeout (dispatcher.DefaultStickyScheduleToStartTimeout, 1 s), each plus the
// replay on another worker and the dispatch.
const (
	heldTaskBound   = 6 * time.Second
	stickyTaskBound = 4 * time.Second
)

// A crash does not stall a queue the crashed worker did not lead. Every worker polls every queue's
// dispatcher task queue, so the run of a queue led by one worker can have its workflow tasks (and
// its sticky cache) on another. Two rounds, each on a queue whose run's last workflow task was run
// by a worker that does not lead it:
//
//   - held: that worker is SIGSTOPped, a request is sent, and the run's next workflow task goes to
//     the stopped worker's sticky queue, where its waiting poll takes it (the server shows the task
//     started); the worker is then SIGKILLed holding it. The task is given to another worker after
//     the runs' workflow task timeout (history: WorkflowTaskTimedOut, start to close).
//   - sticky: that worker is SIGKILLed while the run is idle; the next request's workflow task goes
//     to the dead worker's sticky queue and waits for the workers' sticky timeout.
//
// Requests are sent all the while; every one must be handled (its done record in the etcd ledger,
// seen by a watch) within the round's bound of its send.
func TestNonLeaderCrashDoesNotStallTheQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("runs real worker processes")
	}
	c := threeWorkers(t, "c")
	handled := c.watchLedger(t)

	for _, round := range []struct {
		name  string
		held  bool
		bound time.Duration
	}{{"held workflow task", true, heldTaskBound}, {"sticky cache", false, stickyTaskBound}} {
		t.Run(round.name, func(t *testing.T) {
			defer c.useT(t)()
			q, leader, victim, runID := c.runHeldByANonLeader(handled)
			t.Logf("queue %s: led by %s, its run %s last ran on %s", q, leader.id, runID, victim.id)
			began := time.Now()
			var reqs []sentRequest
			if round.held {
				victim.signal(syscall.SIGSTOP)
				reqs = append(reqs, c.send(q, "held-0"))
				c.waitHeld(q, runID)
			} else {
				c.waitIdle(q, runID)
			}
			victim.signal(syscall.SIGKILL)
			<-victim.done
			for i := 1; i <= 20; i++ { // 2 s of requests after the crash
				reqs = append(reqs, c.send(q, fmt.Sprintf("%s-%d", strings.Fields(round.name)[0], i)))
				time.Sleep(100 * time.Millisecond)
			}
			worst := handled.wait(t, reqs, time.Minute)
			timeouts := c.taskTimeouts(q, runID, began)
			t.Logf("SIGKILL of %s: %d requests, the slowest handled %v after its send (bound %v); workflow task timeouts: %v",
				victim.id, len(reqs), worst.Round(time.Millisecond), round.bound, timeouts)
			if worst >= round.bound {
				t.Errorf("a request to %s was handled %v after its send, want under %v: the crash of %s, which does not lead it, stalled the queue",
					q, worst.Round(time.Millisecond), round.bound, victim.id)
			}
			if round.held && timeouts[enumspb.TIMEOUT_TYPE_START_TO_CLOSE] == 0 {
				t.Errorf("run %s shows no workflow task timed out start to close: no task was held by the killed %s", runID, victim.id)
			}
			c.gen++
			c.start(fmt.Sprintf("c%d-%d", c.gen+3, c.gen))
			c.waitReady(60 * time.Second)
		})
	}
	c.checkOneDispatcherPerQueue()
}

// sentRequest is one dispatch request sent to a queue's dispatcher, and when.
type sentRequest struct {
	key  string
	sent time.Time
}

// send signals a distinct request named name to the queue's dispatcher, retrying a failed send (a
// handover's gap answers NotFound) for up to 30 s, and returns it with the time of its first send.
func (c *cluster) send(queue, name string) sentRequest {
	id, _ := takeover.WorkflowID(c.project(), queue)
	sum := sha256.Sum256([]byte(name))
	req := dispatcher.Request{Type: "e2e", TaskID: queue + "-" + name, PayloadSHA256: hex.EncodeToString(sum[:])}
	r := sentRequest{key: req.Key(), sent: time.Now()}
	err := harness.Poll(c.t.Context(), 30*time.Second, 10*time.Millisecond, func() error {
		return c.tc.SignalWorkflow(c.t.Context(), id, "", dispatcher.SignalDispatch, req)
	})
	if err != nil {
		c.t.Fatalf("send %s to %s: %v", name, queue, err)
	}
	return r
}

// runHeldByANonLeader returns a queue whose current run last ran a workflow task on a live worker
// that does not lead the queue (that worker holds the run in its sticky cache), with its leader,
// that worker and the run. Where every run last ran on its own leader, a run is terminated so that
// its leader starts another, whose first task any worker may take, and the search starts again.
func (c *cluster) runHeldByANonLeader(handled *ledgerTimes) (queue string, leader, holder *proc, runID string) {
	for attempt := range 8 {
		for _, q := range c.queues {
			// A request handled since the run started: its tasks have settled on one worker.
			handled.wait(c.t, []sentRequest{c.send(q, fmt.Sprintf("warm-%d-%d-%d", c.gen, attempt, time.Now().UnixNano()))}, time.Minute)
			l, qs := c.waitLeader(q, takeoverSLA, nil)
			if h := c.procs[c.lastTaskWorker(q, qs.RunID)]; h != nil && h != l && !h.exited() {
				return q, l, h, qs.RunID
			}
		}
		q := c.queues[attempt%len(c.queues)]
		_, qs := c.waitLeader(q, takeoverSLA, nil)
		id, _ := takeover.WorkflowID(c.project(), q)
		if err := c.tc.TerminateWorkflow(c.t.Context(), id, qs.RunID, "e2e: another run, for its first task to land on another worker"); err != nil {
			c.t.Fatal(err)
		}
		for deadline := time.Now().Add(takeoverSLA); ; time.Sleep(50 * time.Millisecond) {
			if _, now := c.waitLeader(q, takeoverSLA, nil); now.RunID != qs.RunID {
				break
			}
			if time.Now().After(deadline) {
				c.t.Fatalf("queue %s: run %s terminated, no other run within %v", q, qs.RunID, takeoverSLA)
			}
		}
	}
	c.t.Fatal("no queue's run ran its last workflow task on a worker that does not lead it, in 8 tries")
	return "", nil, nil, ""
}

// lastTaskWorker returns the server ID of the worker that completed the run's last workflow task,
// from the run's history (the demo worker's identity is <server ID>@<task queue>).
func (c *cluster) lastTaskWorker(queue, runID string) string {
	id, _ := takeover.WorkflowID(c.project(), queue)
	iter := c.tc.GetWorkflowHistory(c.t.Context(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	last := ""
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			c.t.Fatalf("history of %s/%s: %v", id, runID, err)
		}
		if a := ev.GetWorkflowTaskCompletedEventAttributes(); a != nil {
			last = a.GetIdentity()
		}
	}
	server, _, _ := strings.Cut(last, "@")
	return server
}

// waitHeld waits until the run's pending workflow task is started and stays started with the same
// start time: a worker holds it.
func (c *cluster) waitHeld(queue, runID string) {
	id, _ := takeover.WorkflowID(c.project(), queue)
	var seen time.Time
	harness.Eventually(c.t, 10*time.Second, "the run's workflow task held by the stopped worker", func() error {
		d, err := c.tc.DescribeWorkflowExecution(c.t.Context(), id, runID)
		if err != nil {
			return err
		}
		p := d.GetPendingWorkflowTask()
		if p.GetState() != enumspb.PENDING_WORKFLOW_TASK_STATE_STARTED {
			seen = time.Time{}
			return fmt.Errorf("pending workflow task %v", p)
		}
		if at := p.GetStartedTime().AsTime(); !at.Equal(seen) {
			seen = at
			time.Sleep(300 * time.Millisecond)
			return errors.New("started; checking that it stays started")
		}
		return nil
	})
}

// waitIdle waits until the run has no workflow task pending.
func (c *cluster) waitIdle(queue, runID string) {
	id, _ := takeover.WorkflowID(c.project(), queue)
	harness.Eventually(c.t, 10*time.Second, "the run idle", func() error {
		d, err := c.tc.DescribeWorkflowExecution(c.t.Context(), id, runID)
		if err != nil {
			return err
		}
		if p := d.GetPendingWorkflowTask(); p != nil {
			return fmt.Errorf("pending workflow task %v", p)
		}
		return nil
	})
}

// taskTimeouts counts the run's workflow task timeouts since since, by type.
func (c *cluster) taskTimeouts(queue, runID string, since time.Time) map[enumspb.TimeoutType]int {
	id, _ := takeover.WorkflowID(c.project(), queue)
	iter := c.tc.GetWorkflowHistory(c.t.Context(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	out := map[enumspb.TimeoutType]int{}
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			c.t.Fatalf("history of %s/%s: %v", id, runID, err)
		}
		if a := ev.GetWorkflowTaskTimedOutEventAttributes(); a != nil && ev.GetEventTime().AsTime().After(since) {
			out[a.GetTimeoutType()]++
		}
	}
	return out
}

// ledgerTimes follows the dispatch ledger (the demo workers' default prefix) from now on.
type ledgerTimes struct {
	watch *ledger.Watch
}

// watchLedger starts a watch of the ledger that runs until the test ends.
func (c *cluster) watchLedger(t *testing.T) *ledgerTimes {
	w, err := ledger.NewWatch(t.Context(), c.etcd, ledger.DefaultPrefix, c.project())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	wg.Go(func() { w.Run(ctx) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &ledgerTimes{watch: w}
}

// wait waits up to d until every request has a done record, and returns the longest time from a
// request's send to the watch's sight of its first completion.
func (l *ledgerTimes) wait(t *testing.T, reqs []sentRequest, d time.Duration) time.Duration {
	t.Helper()
	var worst time.Duration
	harness.Eventually(t, d, fmt.Sprintf("%d requests handled", len(reqs)), func() error {
		done, _ := l.watch.Seen()
		worst = 0
		for _, r := range reqs {
			c := done[r.key]
			if len(c) == 0 {
				return fmt.Errorf("request %s not done", r.key[:12])
			}
			worst = max(worst, c[0].Seen.Sub(r.sent))
		}
		return nil
	})
	return worst
}

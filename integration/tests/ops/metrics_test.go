package ops_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.temporal.io/sdk/client"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/heartbeat"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/harness"
	"github.com/baton-run/baton/integration/servers/redisx"
	"github.com/baton-run/baton/integration/servers/temporalx"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// buildDemoWorker builds cmd/demo-worker once per test binary, in the root module (which holds its
// dependencies), as the e2e tests do.
var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

func demoWorker(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		root, err := filepath.Abs(filepath.Join("..", "..", ".."))
		if err != nil {
			buildErr = err
			return
		}
		// Beside the test binary: go test removes its work directory afterwards (TestMain cannot
		// clean up, temporalx.Main exits).
		parent := ""
		if exe, err := os.Executable(); err == nil {
			parent = filepath.Dir(exe)
		}
		dir, err := os.MkdirTemp(parent, "demo-worker-")
		if err != nil && parent != "" {
			dir, err = os.MkdirTemp("", "baton-ops-")
		}
		if err != nil {
			buildErr = err
			return
		}
		buildBin = filepath.Join(dir, "demo-worker")
		cmd := exec.Command("go", "build", "-o", buildBin, "./cmd/demo-worker")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/demo-worker: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildBin
}

// httpClient keeps no idle connections, so that no goroutine outlives the test (TestMain checks).
var httpClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func get(addr, path string) ([]byte, bool) {
	resp, err := httpClient.Get("http://" + addr + path)
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return b, err == nil && resp.StatusCode == http.StatusOK
}

// electionKeys is the layout of the workers' queue elections (the default prefix).
var electionKeys = election.Keys{Prefix: election.DefaultConfig().Prefix}

// startWorker runs one demo worker with env and stops it (SIGTERM, then SIGKILL) at the end of the
// test; it returns the address of its HTTP endpoints.
func startWorker(t *testing.T, bin, id string, env []string) string {
	t.Helper()
	return startProc(t, bin, id, env, "run", "-server-id", id, "-http")
}

// startProc runs bin with args, then a listen address (an inherited socket, so that no other process
// can take its port first), and env; it stops it (SIGTERM, then SIGKILL) at the end of the test, whose
// failure shows the tail of its output under name. It returns the address the socket listens on.
func startProc(t *testing.T, bin, name string, env []string, args ...string) string {
	t.Helper()
	sock, err := harness.ListenSocket()
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	cmd := exec.Command(bin)
	cmd.Args = append(append(cmd.Args, args...), sock.Pass(cmd))
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var out harness.Output
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("%s output:\n%s", name, harness.Tail(out.String(), 8000))
		}
	})
	return sock.Addr
}

// scrapeNames returns the metric names of a Prometheus text exposition (samples, not comments).
func scrapeNames(body []byte) map[string]bool {
	out := map[string]bool{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end <= 0 {
			continue
		}
		out[line[:end]] = true
	}
	return out
}

// exported reports whether name is in the scrape: as a sample name, or as the base name of a
// histogram (name_bucket) or summary (name_count).
func exported(names map[string]bool, name string) bool {
	return names[name] || names[name+"_bucket"] || names[name+"_count"]
}

// familyOf maps a sample name to its metric family (histogram samples to the histogram's name).
func familyOf(name string, names map[string]bool) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok && names[base+"_bucket"] {
			return base
		}
	}
	return name
}

// usedMetrics collects the metric names of the dashboard's expressions and of the rules, recording
// rules resolved to what they are computed from.
func usedMetrics(t *testing.T, root string) map[string][]string {
	t.Helper()
	rules := loadRules(t, root)
	records := rules.records()
	used := map[string][]string{} // name -> where
	for _, e := range loadDashboard(t, root).expressions() {
		for _, m := range metricNames(e, records) {
			used[m] = append(used[m], "dashboard")
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			where := "rule " + r.Alert + r.Record
			for _, m := range metricNames(r.Expr, records) {
				used[m] = append(used[m], where)
			}
		}
	}
	return used
}

// TestMetricNamesExist starts a real demo worker against real etcd, Temporal and Redis, makes it lead
// its queues, run reconcile cycles, evict a dead worker, clean up a stale dispatcher, meet malformed
// entries, lose a leadership term, replace a run an operator terminated and a run that carries a
// higher token than its term (a history regression), and handle requests a producer sends it
// (`demo-worker load -mode dispatch -metrics-addr`: the Producer's metrics are exported by the
// process that calls Dispatch, not by the worker). It then checks that every metric the dashboard and
// the alert rules use is in the /metrics of one of the two, and that every Baton metric either
// exports is on the dashboard.
//
// Counters of the OpenTelemetry exporter appear only once they have been incremented, hence the events.
func TestMetricNamesExist(t *testing.T) {
	root := repoRoot(t)
	used := usedMetrics(t, root)
	if len(used) < 10 {
		t.Fatalf("only %d metric names found in the dashboard and rules: the parser is broken", len(used))
	}

	etcd := etcdx.Start(t, etcdx.Options{})
	rs := redisx.Start(t, redisx.Options{})
	rdb := redisx.Client(t, rs)
	ec := etcdx.Client(t, etcd)
	bin := demoWorker(t)

	project := fmt.Sprintf("ops%d", time.Now().UnixNano()%1e9)
	// A heartbeat prefix of this test's own: the malformed entry below must not reach other
	// reconcilers sharing the Redis (a compose stack, when BATON_REDIS_ADDR points at one).
	hbPrefix := "opstest:" + project + ":heartbeat:"
	queues := []string{"orders", "refunds", "restored", "spare"}
	env := []string{
		"BATON_PROJECT=" + project, "BATON_QUEUES=" + strings.Join(queues, ","),
		"BATON_ETCD_ENDPOINTS=" + strings.Join(etcd.Endpoints(), ","),
		"BATON_TEMPORAL_ADDRESS=" + temporalServer.HostPort(), "BATON_TEMPORAL_NAMESPACE=" + temporalServer.Namespace(),
		"BATON_REDIS_ADDR=" + rs.Addr(),
		"BATON_HEARTBEAT_PREFIX=" + hbPrefix,
		"BATON_ELECTION_TTL=2s", "BATON_HEARTBEAT_INTERVAL=250ms",
		"BATON_RECONCILE_INTERVAL=1s", "BATON_RECONCILE_STALE_AFTER=1500ms",
		"BATON_REGISTRY_HEARTBEAT_INTERVAL=250ms",
		"BATON_LOG_LEVEL=info",
	}
	if pw := rs.Password(); pw != "" {
		env = append(env, "BATON_REDIS_PASSWORD="+pw)
	}
	// Registered before the worker starts, so that it runs after the worker has stopped: the Redis
	// keys of this test's project go (on a shared Redis too). Election keys go with their leases.
	t.Cleanup(func() {
		bg := context.Background()
		for _, pattern := range []string{registry.Pattern("", project), heartbeat.Pattern(hbPrefix, project)} {
			iter := rdb.Scan(bg, 0, pattern, 100).Iterator()
			for iter.Next(bg) {
				_ = rdb.Del(bg, iter.Val()).Err()
			}
		}
	})
	// Another worker leads orders, restored and spare when the demo worker starts, and goes without
	// naming a successor: the demo worker wins orders from it (balance owner changes). Restored has a
	// leader from before its run below is started until the demo worker takes it over: the reconciler's
	// sweep ends an open run whose queue has no leader, and would end that run before the takeover sees
	// it. Three of four queues on two workers is more than ShedAbove × the fair share (2), so the demo
	// worker stands in line behind each (it stands behind no leader that could not shed).
	prevEl, err := election.New(ec, election.Config{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = prevEl.Close(context.WithoutCancel(t.Context())) })
	var prevTerms []*election.Term
	for _, q := range []string{"orders", "restored", "spare"} {
		term, err := prevEl.Campaign(t.Context(), project, q, "ops-previous")
		if err != nil {
			t.Fatal(err)
		}
		prevTerms = append(prevTerms, term)
	}

	// A run of "restored" left by an owner whose token is far above anything this etcd has issued, as
	// after a restore without --bump-revision: the worker's takeover counts a regression and replaces
	// it. Its task queue has no worker, so it stays open until then.
	tc := temporalx.Client(t, temporalServer)
	restoredID, err := takeover.WorkflowID(project, "restored")
	if err != nil {
		t.Fatal(err)
	}
	pre := takeover.Owner{Project: project, Queue: "restored", ServerID: "pre-restore-worker", Token: 1 << 40,
		ElectionKey: electionKeys.Candidates(project, "restored") + "0", TakeoverStartedAt: time.Now()}
	preRun, err := tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: restoredID, TaskQueue: "ops-nobody-polls",
		Memo: map[string]any{takeover.MemoKey: pre}}, takeover.DefaultWorkflowType, pre)
	if err != nil {
		t.Fatal(err)
	}

	addr := startWorker(t, bin, "ops-1", env)

	leads := func(q string) (baton.QueueStatus, bool) {
		b, ok := get(addr, "/status")
		if !ok {
			return baton.QueueStatus{}, false
		}
		var st baton.Status
		if json.Unmarshal(b, &st) != nil {
			return baton.QueueStatus{}, false
		}
		for _, s := range st.Queues {
			if s.Queue == q && s.Leading && s.RunID != "" {
				return s, true
			}
		}
		return baton.QueueStatus{}, false
	}
	waitFor(t, 30*time.Second, "the worker leads the queue nobody else leads", func() bool {
		_, refunds := leads("refunds")
		return refunds
	})
	// Restored must never be without a candidate key: the worker stands in line before the other goes.
	waitFor(t, 30*time.Second, "the worker stands in line for restored", func() bool {
		resp, err := ec.Get(t.Context(), prevEl.ElectionKey(project, "restored")+"/", clientv3.WithPrefix())
		if err != nil {
			return false
		}
		for _, kv := range resp.Kvs {
			if string(kv.Value) == "ops-1" {
				return true
			}
		}
		return false
	})
	for _, term := range prevTerms {
		if err := term.Resign(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 30*time.Second, "the worker leads every queue", func() bool {
		for _, q := range queues {
			if _, ok := leads(q); !ok {
				return false
			}
		}
		return true
	})
	ctx := t.Context()
	if s, _ := leads("restored"); s.RunID == preRun.GetRunID() || s.Token >= pre.Token {
		t.Fatalf("restored: leading with token %d and run %s; want the pre-restore run %s replaced", s.Token, s.RunID, preRun.GetRunID())
	}

	// An operator terminates the dispatcher run of orders: the leader sees the close and replaces the
	// run within its term (run closes, status terminated).
	ordersBefore, _ := leads("orders")
	if err := tc.TerminateWorkflow(ctx, ordersBefore.WorkflowID, ordersBefore.RunID, "ops test: an operator's terminate"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "orders' terminated run is replaced in the same term", func() bool {
		s, ok := leads("orders")
		return ok && s.Token == ordersBefore.Token && s.RunID != ordersBefore.RunID && s.DispatcherOpen && s.Replacements >= 1
	})

	// A worker that registered and died: the leader of orders evicts it (registry evictions), and a
	// heartbeat entry that is not a server ID (registry malformed).
	reg, err := registry.New(rdb, registry.Config{Project: project, HeartbeatInterval: 250 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Register(ctx, registry.Registration{ServerID: "ghost-worker", Queue: "orders", PID: 1,
		Capabilities: []string{"dispatch"}, MaxConcurrency: 1}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.ZAdd(ctx, reg.HeartbeatKey("orders"), redis.Z{Score: 1, Member: "not a server id"}).Err(); err != nil {
		t.Fatal(err)
	}

	// A crashed owner's heartbeat, an hour old, of a queue nobody leads: the reconciler terminates its
	// run (already closed: it never existed) and deletes it (dispatcher terminations). And an entry
	// Baton did not write (cleanup errors, kind malformed).
	ghostID, err := takeover.WorkflowID(project, "ghost")
	if err != nil {
		t.Fatal(err)
	}
	nowMs := time.Now().UnixMilli()
	if err := rdb.HSet(ctx, heartbeat.Key(hbPrefix, project, ghostID), map[string]any{
		heartbeat.FieldWorkflowID: ghostID, heartbeat.FieldRunID: uuid.NewString(), heartbeat.FieldServerID: "crashed-worker",
		heartbeat.FieldToken: "1", heartbeat.FieldProject: project, heartbeat.FieldQueue: "ghost",
		heartbeat.FieldUpdatedMs: strconv.FormatInt(nowMs-time.Hour.Milliseconds(), 10), heartbeat.FieldVersion: "1",
	}).Err(); err != nil {
		t.Fatal(err)
	}
	garbage := heartbeat.ProjectPrefix(hbPrefix, project) + "not-a-dispatcher"
	if err := rdb.HSet(ctx, garbage, "owner", "someone else").Err(); err != nil {
		t.Fatal(err)
	}

	// The election key of refunds deleted under the leader: it steps down (key_lost), campaigns
	// again, and its takeover terminates its own previous run by run ID (takeover terminations).
	before, _ := leads("refunds")
	resp, err := ec.Delete(ctx, electionKeys.Candidates(project, "refunds"), clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if resp.Deleted == 0 {
		t.Fatalf("no election key under %s", electionKeys.Candidates(project, "refunds"))
	}
	waitFor(t, 30*time.Second, "refunds is taken over again after its key was deleted", func() bool {
		s, ok := leads("refunds")
		return ok && s.Token > before.Token && s.RunID != before.RunID
	})

	// A producer sends requests to every queue through dispatcher.Producer and serves its metrics; the
	// worker's handler runs count them. Started last: the handovers above are over, so no request is
	// carried over from one run to the next.
	loadAddr := startProc(t, bin, "load", env, "load", "-mode", "dispatch",
		"-rate", "5", "-duration", "5m", "-interval", "5s", "-run-id", "ops-"+project, "-metrics-addr")

	// Every name used must be exported by the worker or the producer; wait for the reconcile cycles,
	// the evictions and the handled requests to happen.
	var names map[string]bool
	var missing []string
	deadline := time.Now().Add(90 * time.Second)
	for {
		names = map[string]bool{}
		for _, a := range []string{addr, loadAddr} {
			if body, ok := get(a, "/metrics"); ok {
				maps.Copy(names, scrapeNames(body))
			}
		}
		missing = missing[:0]
		for m := range used {
			if !exported(names, m) {
				missing = append(missing, m)
			}
		}
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			var b strings.Builder
			for _, m := range missing {
				fmt.Fprintf(&b, "\n  %s (used by %s)", m, strings.Join(slices.Compact(slices.Sorted(slices.Values(used[m]))), ", "))
			}
			var have []string
			for n := range names {
				if strings.HasPrefix(n, "baton") {
					have = append(have, n)
				}
			}
			slices.Sort(have)
			t.Fatalf("metrics used by the dashboard or the rules but exported by neither the demo worker nor the load's producer:%s\nexported: %v", b.String(), have)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// And the reverse: every Baton metric the worker or the producer exports has a place on the dashboard.
	onDashboard := map[string]bool{}
	for m, where := range used {
		if slices.Contains(where, "dashboard") {
			onDashboard[familyOf(m, names)] = true
		}
	}
	var exportedBaton []string
	for n := range names {
		switch {
		case strings.HasPrefix(n, "baton_"):
			exportedBaton = append(exportedBaton, familyOf(n, names))
		case strings.HasPrefix(n, "dispatcher_"):
			// Every Baton series carries the baton_ prefix, so that none collides with an app's own.
			t.Errorf("the demo worker or the load exports %s without the baton_ prefix", n)
		}
	}
	slices.Sort(exportedBaton)
	exportedBaton = slices.Compact(exportedBaton)
	for _, f := range exportedBaton {
		if !onDashboard[f] {
			t.Errorf("the demo worker or the load exports %s but no dashboard panel shows it", f)
		}
	}
	t.Logf("%d metric names used by the dashboard and rules, all exported: %v; %d Baton metric families exported, all on the dashboard",
		len(used), slices.Sorted(maps.Keys(used)), len(exportedBaton))
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

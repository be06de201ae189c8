package node_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/authpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.uber.org/fx/fxtest"
	"golang.org/x/crypto/bcrypt"

	"github.com/baton-run/baton"
	"github.com/baton-run/baton/balance"
	"github.com/baton-run/baton/dispatcher"
	"github.com/baton-run/baton/election"
	"github.com/baton-run/baton/integration/servers/etcdx"
	"github.com/baton-run/baton/integration/servers/workerproc"
	"github.com/baton-run/baton/internal/opscli"
	"github.com/baton-run/baton/ledger"
	"github.com/baton-run/baton/reconciler"
	"github.com/baton-run/baton/registry"
	"github.com/baton-run/baton/takeover"
)

// baton runs the operator's command against e's servers for project, as an operator would.
func (e *env) baton(t *testing.T, project string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := workerproc.BuildBaton()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(workerproc.Environ(), "BATON_PROJECT="+project, "BATON_ETCD_ENDPOINTS="+strings.Join(e.cc.EtcdEndpoints, ","),
		"BATON_TEMPORAL_ADDRESS="+e.cc.TemporalAddress, "BATON_TEMPORAL_NAMESPACE="+e.cc.TemporalNamespace,
		"BATON_REDIS_ADDR="+e.cc.RedisAddr, "BATON_REDIS_PASSWORD="+e.cc.RedisPassword)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("baton %q: %v", args, err)
	}
	return out.String(), errOut.String(), code
}

// baton status shows who leads and its run; drain hands the leader's queue to the other worker, which
// the registry and the workers show; undrain takes it back; a worker nobody registered is refused;
// ledger reads a request's record.
func TestBatonStatusDrainUndrainLedger(t *testing.T) {
	e := newEnv(t)
	p := project()
	nodes := map[string]*baton.Node{}
	for _, id := range []string{"w1", "w2"} {
		app, n := e.app(t, fast(p, id, "q1"))
		app.RequireStart()
		t.Cleanup(app.RequireStop)
		nodes[id] = n
	}
	var leader, other string
	var led baton.QueueStatus
	eventually(t, 30*time.Second, "a leader of q1 with an open run", func() error {
		for id, n := range nodes {
			if qs, ok := leading(n, "q1"); ok && qs.DispatcherOpen {
				leader, led = id, qs
				return nil
			}
		}
		return errors.New("nobody leads q1")
	})
	for id := range nodes {
		if id != leader {
			other = id
		}
	}

	out, errOut, code := e.baton(t, p, "status", "-json")
	var st struct {
		Queues []struct {
			Queue  string
			Leader struct {
				ServerID string `json:"server_id"`
				Token    int64
			}
			Dispatcher struct {
				RunID string `json:"run_id"`
			}
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st.Queues) != 1 || st.Queues[0].Leader.ServerID != leader ||
		st.Queues[0].Leader.Token != led.Token || st.Queues[0].Dispatcher.RunID != led.RunID {
		t.Fatalf("baton status: exit %d, %s %s; want q1 led by %s (token %d), run %s", code, out, errOut, leader, led.Token, led.RunID)
	}

	// drain waits until the worker leads nothing, and says where its queue went.
	if out, errOut, code := e.baton(t, p, "drain", leader); code != 0 || !strings.Contains(out, fmt.Sprintf("q1: %s (token %d) -> %s (token ", leader, led.Token, other)) {
		t.Fatalf("baton drain %s: exit %d, %s %s; want q1 moved from %s to %s", leader, code, out, errOut, leader, other)
	}
	reg, err := registry.New(e.rdb, registry.Config{Project: p})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the drained worker's queue led by the other, with its run", func() error {
		if w, err := reg.Get(t.Context(), "q1", leader); err != nil || w.Status != registry.StatusDraining {
			return errors.New("not DRAINING in the registry")
		}
		if qs, ok := leading(nodes[other], "q1"); !ok || !qs.DispatcherOpen {
			return errors.New(other + " does not lead q1 yet")
		}
		return nil
	})
	// A drain moves the queue once: it stays with the worker it went to (the drained one stands
	// nowhere while another does).
	moved, _ := leading(nodes[other], "q1")
	time.Sleep(3 * time.Second)
	if qs, ok := leading(nodes[other], "q1"); !ok || qs.Token != moved.Token {
		t.Fatalf("q1 moved again after the drain: %s led it at token %d, now %+v (leading %v)", other, moved.Token, qs, ok)
	}
	if out, errOut, code := e.baton(t, p, "undrain", leader); code != 0 {
		t.Fatalf("baton undrain %s: exit %d, %s %s", leader, code, out, errOut)
	}
	eventually(t, 30*time.Second, "the undrained worker ONLINE again, and knowing it", func() error {
		if w, err := reg.Get(t.Context(), "q1", leader); err != nil || w.Status != registry.StatusOnline {
			return errors.New("not ONLINE in the registry")
		}
		if nodes[leader].Draining() {
			return errors.New(leader + " still drains")
		}
		return nil
	})
	if _, errOut, code := e.baton(t, p, "drain", "nobody"); code != 1 || !strings.Contains(errOut, "nobody") {
		t.Fatalf("baton drain of an unregistered worker: exit %d, %s", code, errOut)
	}

	// A record as the ledger writes it (ledger/doc.go: "<state> <server_id> <token>"), by the
	// leader's term: ledger finds the run of that term, by the key or by the request's fields.
	etcd := etcdx.Client(t, e.etcd)
	req := dispatcher.Request{Type: "invoice", TaskID: "t-done", PayloadSHA256: strings.Repeat("ab", 32)}
	if _, err := etcd.Put(t.Context(), ledger.Key("", p, req.Key()), fmt.Sprintf("done %s %d", leader, led.Token)); err != nil {
		t.Fatal(err)
	}
	type run struct {
		RunID string `json:"run_id"`
	}
	var lr struct {
		Key    string
		Found  bool
		Record ledger.Record
		Runs   []run
	}
	for _, args := range [][]string{
		{"ledger", "-json", req.Key()},
		{"ledger", "find", "-json", "-type", req.Type, "-id", req.TaskID, "-payload-sha256", req.PayloadSHA256},
	} {
		out, errOut, code = e.baton(t, p, args...)
		if code != 0 || json.Unmarshal([]byte(out), &lr) != nil || lr.Key != req.Key() || !lr.Found || lr.Record.State != ledger.Done ||
			lr.Record.ServerID != leader || lr.Record.Token != led.Token ||
			!slices.ContainsFunc(lr.Runs, func(r run) bool { return r.RunID == led.FirstRunID }) {
			t.Fatalf("baton %q: exit %d, %s %s; want the record by %s at token %d in run %s", args, code, out, errOut, leader, led.Token, led.FirstRunID)
		}
	}
	never := dispatcher.Request{Type: "invoice", TaskID: "t-never", PayloadSHA256: strings.Repeat("ab", 32)}.Key()
	if out, _, code := e.baton(t, p, "ledger", never); code != 0 || !strings.Contains(out, "not begun") {
		t.Fatalf("baton ledger of a key never begun: exit %d, %s", code, out)
	}
	// Not a key (a task ID): refused, not read as a request never begun.
	if out, errOut, code := e.baton(t, p, "ledger", "t-never"); code != 2 || strings.Contains(out, "not begun") || !strings.Contains(errOut, "ledger find") {
		t.Fatalf("baton ledger of a task ID: exit %d, %s %s", code, out, errOut)
	}
	bad := dispatcher.Request{Type: "invoice", TaskID: "t-bad", PayloadSHA256: strings.Repeat("ab", 32)}.Key()
	if _, err := etcd.Put(t.Context(), ledger.Key("", p, bad), "garbage"); err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := e.baton(t, p, "ledger", bad); code != 1 || !strings.Contains(errOut, bad) {
		t.Fatalf("baton ledger of a bad record: exit %d, %s", code, errOut)
	}
}

// drain of a worker whose queue no other worker serves waits -timeout, then exits 1 naming the queue
// it still leads; -wait=false returns at once.
func TestBatonDrainTimesOut(t *testing.T) {
	e := newEnv(t)
	p := project()
	app, n := e.app(t, fast(p, "w-alone", "q1"))
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	eventually(t, 30*time.Second, "w-alone leads q1", func() error {
		if _, ok := leading(n, "q1"); !ok {
			return errors.New("not leading")
		}
		return nil
	})
	began := time.Now()
	out, errOut, code := e.baton(t, p, "drain", "-timeout", "3s", "w-alone")
	if took := time.Since(began); code != 1 || !strings.Contains(errOut, "w-alone still leads q1 after 3s") || took < 3*time.Second {
		t.Fatalf("baton drain of the only worker: exit %d after %v, %s %s; want 1 after 3s naming q1", code, took, out, errOut)
	}
	if _, ok := leading(n, "q1"); !ok {
		t.Fatal("the draining worker no longer leads q1, which nobody else serves")
	}
	if out, errOut, code := e.baton(t, p, "drain", "-wait=false", "w-alone"); code != 0 || !strings.Contains(out, "drain: w-alone on q1") {
		t.Fatalf("baton drain -wait=false: exit %d, %s %s", code, out, errOut)
	}
}

// The role `baton acl etcd -extra-prefix` prints, applied to an etcd with authentication on, lets
// its user write the application's own prefix, and nothing outside the role.
func TestBatonACLEtcdExtraPrefix(t *testing.T) {
	e := newEnv(t)
	e.etcd = etcdx.Start(t, etcdx.Options{Configure: func(_ int, cfg *embed.Config) { cfg.BcryptCost = uint(bcrypt.MinCost) }})
	p := project()
	extra := "/app/" + p + "/announce/"
	out, errOut, code := e.baton(t, p, "acl", "etcd", "-user", "app", "-extra-prefix", extra)
	if code != 0 {
		t.Fatalf("baton acl etcd: exit %d, %s", code, errOut)
	}
	root := etcdx.Client(t, e.etcd)
	ctx := t.Context()
	steps := []func() error{
		func() error { _, err := root.RoleAdd(ctx, "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "app"); return err },
		func() error { _, err := root.UserAdd(ctx, "app", "app-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "app", "app"); return err },
	}
	granted := 0
	for _, line := range strings.Split(out, "\n") {
		// etcdctl role grant-permission ROLE readwrite PREFIX --prefix=true
		if f := strings.Fields(line); len(f) == 7 && f[1] == "role" && f[2] == "grant-permission" && f[3] == "app" {
			granted++
			steps = append(steps, func() error {
				_, err := root.RoleGrantPermission(ctx, "app", f[5], clientv3.GetPrefixRangeEnd(f[5]), clientv3.PermissionType(authpb.READWRITE))
				return err
			})
		}
	}
	if granted == 0 || !strings.Contains(out, "readwrite "+extra+" --prefix=true") {
		t.Fatalf("no grant of %s in:\n%s", extra, out)
	}
	steps = append(steps, func() error { _, err := root.AuthEnable(ctx); return err })
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth setup, step %d: %v", i, err)
		}
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.etcd.Endpoints(), Username: "app", Password: "app-pw", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	if _, err := cli.Put(ctx, extra+"run-1", "started"); err != nil {
		t.Fatalf("the application's write under -extra-prefix %s: %v", extra, err)
	}
	if _, err := cli.Put(ctx, "/app/"+p+"/other", "x"); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("a write outside the role was not refused: %v", err)
	}
}

// The role `baton acl etcd` prints (baton.Config.EtcdPrefixes, which its output is held to) is
// enough for a worker, applied to an etcd with authentication on: the worker leads, takes the
// dispatcher over and writes the ledger; and it is no more: the user reads nothing else.
func TestEtcdRoleOfBatonACLIsEnough(t *testing.T) {
	e := newEnv(t)
	// etcd checks a password with bcrypt on every Authenticate, and its client authenticates again for
	// every stream (each keepalive): at the default cost a loaded 2-core machine misses a 2 s TTL.
	e.etcd = etcdx.Start(t, etcdx.Options{Configure: func(_ int, cfg *embed.Config) { cfg.BcryptCost = uint(bcrypt.MinCost) }})
	e.cc.EtcdEndpoints = e.etcd.Endpoints()
	p := project()
	cfg := fast(p, "w-acl", "q1")
	cfg.Election.TTL = 5 * time.Second
	root := etcdx.Client(t, e.etcd)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	steps := []func() error{
		func() error { _, err := root.RoleAdd(ctx, "root"); return err },
		func() error { _, err := root.UserAdd(ctx, "root", "root-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := root.RoleAdd(ctx, "baton"); return err },
		func() error { _, err := root.UserAdd(ctx, "baton", "baton-pw"); return err },
		func() error { _, err := root.UserGrantRole(ctx, "baton", "baton"); return err },
	}
	for _, prefix := range cfg.EtcdPrefixes(ledger.DefaultPrefix) {
		steps = append(steps, func() error {
			_, err := root.RoleGrantPermission(ctx, "baton", prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(authpb.READWRITE))
			return err
		})
	}
	steps = append(steps, func() error { _, err := root.AuthEnable(ctx); return err })
	for i, step := range steps {
		if err := step(); err != nil {
			t.Fatalf("etcd auth setup, step %d: %v", i, err)
		}
	}
	user := *e
	user.cc.EtcdUsername, user.cc.EtcdPassword = "baton", "baton-pw"
	app, n := user.app(t, cfg)
	app.RequireStart()
	t.Cleanup(app.RequireStop)
	var qs baton.QueueStatus
	eventually(t, 30*time.Second, "the worker with Baton's role leads q1 with an open run", func() error {
		var ok bool
		if qs, ok = leading(n, "q1"); !ok || !qs.DispatcherOpen {
			return errors.New("not leading")
		}
		return nil
	})

	// Every part of the worker wrote its keys: its balance member record and its reconciler candidacy
	// (read as root).
	admin, err := clientv3.New(clientv3.Config{Endpoints: e.cc.EtcdEndpoints, Username: "root", Password: "root-pw", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	full := n.Config()
	eventually(t, 30*time.Second, "the worker's balance record and reconciler candidacy in etcd", func() error {
		for _, k := range []string{
			balance.Keys{ElectionPrefix: cmp.Or(full.Election.Prefix, election.DefaultConfig().Prefix)}.Member(p, "w-acl"),
			election.Keys{Prefix: full.ReconcilerElectionPrefix}.Candidates(p, reconciler.ElectionQueue),
		} {
			resp, err := admin.Get(ctx, k, clientv3.WithPrefix(), clientv3.WithCountOnly())
			if err != nil {
				return err
			}
			if resp.Count == 0 {
				return errors.New("nothing under " + k)
			}
		}
		return nil
	})

	cli, err := clientv3.New(clientv3.Config{Endpoints: e.cc.EtcdEndpoints, Username: "baton", Password: "baton-pw", DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	dl, err := ledger.New(cli, ledger.Config{})
	if err != nil {
		t.Fatal(err)
	}
	term, ok := n.Term("q1")
	if !ok {
		t.Fatal("no term of q1")
	}
	owner := takeover.Owner{Project: p, Queue: "q1", ServerID: "w-acl", Token: term.Token(), ElectionKey: term.Key()}
	if _, err := dl.Begin(ctx, "k1", owner); err != nil {
		t.Fatalf("ledger Begin as the Baton user: %v", err)
	}
	if err := dl.Complete(ctx, "k1", owner); err != nil {
		t.Fatalf("ledger Complete as the Baton user: %v", err)
	}
	if _, err := cli.Get(ctx, "/other/", clientv3.WithPrefix()); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Fatalf("the Baton user read outside its prefixes: %v", err)
	}
}

// verify finds nothing wrong in a deployment that only handed over, and fails on each violation
// planted by hand: a running run with a stale token, and a run ended by a conflict policy.
func TestBatonVerify(t *testing.T) {
	e := newEnv(t)
	p := project()
	apps := map[string]*fxtest.App{}
	nodes := map[string]*baton.Node{}
	for _, id := range []string{"w1", "w2"} {
		app, n := e.app(t, fast(p, id, "q1", "q2"))
		app.RequireStart()
		apps[id], nodes[id] = app, n
	}
	t.Cleanup(func() {
		for _, app := range apps {
			app.RequireStop()
		}
	})
	ledBy := func(q string) (string, baton.QueueStatus) {
		var who string
		var led baton.QueueStatus
		eventually(t, 30*time.Second, q+" led with an open run", func() error {
			for id, n := range nodes {
				if qs, ok := leading(n, q); ok && qs.DispatcherOpen {
					who, led = id, qs
					return nil
				}
			}
			return errors.New("nobody leads " + q)
		})
		return who, led
	}
	ledBy("q1")
	ledBy("q2")
	// A graceful handover: the leader of q1 stops, the other takes over.
	first, _ := ledBy("q1")
	apps[first].RequireStop()
	delete(apps, first)
	delete(nodes, first)
	ledBy("q1")
	// verify re-checks a state violation -settle later: the new leader's first heartbeat need not be
	// written yet.
	if out, errOut, code := e.baton(t, p, "verify", "-queues", "q1,q2"); code != 0 {
		t.Fatalf("baton verify after a clean handover: exit %d\n%s%s", code, out, errOut)
	}

	// A run ended by a conflict policy: a start with TERMINATE_EXISTING and a newer token in its memo
	// ends the leader's run; the leader then replaces the intruder. The history keeps the evidence.
	id, _ := takeover.WorkflowID(p, "q2")
	_, led := ledBy("q2")
	intruder := takeover.Owner{Project: p, Queue: "q2", ServerID: "intruder", Token: led.Token + 1000}
	if _, err := e.tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id, TaskQueue: takeover.DefaultTaskQueue(p, "q2"),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING, WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		Memo: map[string]any{takeover.MemoKey: intruder}}, takeover.DefaultWorkflowType, intruder); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := e.baton(t, p, "verify", "-json", "-queues", "q2", "-settle", "100ms")
	var v struct {
		Violations []struct{ Check, Queue, Detail string }
	}
	if code != 1 || json.Unmarshal([]byte(out), &v) != nil ||
		!slices.ContainsFunc(v.Violations, func(x struct{ Check, Queue, Detail string }) bool { return x.Check == "superseded" && x.Queue == "q2" }) {
		t.Fatalf("baton verify after a conflict-policy termination: exit %d, %s %s; want a superseded violation on q2", code, out, errOut)
	}
	t.Logf("conflict policy: %+v", v.Violations)

	// A running run with a stale token on a queue nobody leads any more: stop every worker, then start
	// a run by hand that names an old owner.
	for id, app := range apps {
		app.RequireStop()
		delete(apps, id)
	}
	stale := takeover.Owner{Project: p, Queue: "q1", ServerID: "ghost", Token: 1}
	id1, _ := takeover.WorkflowID(p, "q1")
	if _, err := e.tc.ExecuteWorkflow(t.Context(), client.StartWorkflowOptions{ID: id1, TaskQueue: takeover.DefaultTaskQueue(p, "q1"),
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		Memo:                  map[string]any{takeover.MemoKey: stale}}, takeover.DefaultWorkflowType, stale); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = e.baton(t, p, "verify", "-json", "-queues", "q1", "-settle", "100ms")
	v.Violations = nil
	if code != 1 || json.Unmarshal([]byte(out), &v) != nil ||
		!slices.ContainsFunc(v.Violations, func(x struct{ Check, Queue, Detail string }) bool { return x.Check == "unled-run" }) ||
		!slices.ContainsFunc(v.Violations, func(x struct{ Check, Queue, Detail string }) bool { return x.Check == "token-order" }) {
		t.Fatalf("baton verify with a stale run: exit %d, %s %s; want unled-run and token-order on q1", code, out, errOut)
	}
	t.Logf("stale run: %+v", v.Violations)

	// A server that is down: not judged, exit 2.
	if err := e.redis.Stop(); err != nil {
		t.Fatal(err)
	}
	if out, errOut, code := e.baton(t, p, "verify", "-queues", "q1", "-timeout", "500ms"); code != 2 {
		t.Fatalf("baton verify with Redis down: exit %d, %s %s; want 2", code, out, errOut)
	}
}

// transfer moves a queue to the worker named, through the designated-successor path: the old
// leader's run is terminated by its owner and the new leader's run is open; it refuses a worker that
// does not serve the queue and a transfer to the leader; without -to the queue goes to another worker.
func TestBatonTransfer(t *testing.T) {
	e := newEnv(t)
	p := project()
	nodes := map[string]*baton.Node{}
	for _, id := range []string{"w1", "w2", "w3"} {
		cfg := fast(p, id, "q1")
		cfg.Balance.Grace = 2 * time.Second
		app, n := e.app(t, cfg)
		app.RequireStart()
		t.Cleanup(app.RequireStop)
		nodes[id] = n
	}
	// A worker of another queue only: it does not stand for q1.
	app, _ := e.app(t, fast(p, "w-other", "q2"))
	app.RequireStart()
	t.Cleanup(app.RequireStop)

	ledBy := func(what string, ok func(id string) bool) (string, baton.QueueStatus) {
		var who string
		var led baton.QueueStatus
		eventually(t, 30*time.Second, what, func() error {
			for id, n := range nodes {
				if qs, isLeading := leading(n, "q1"); isLeading && qs.DispatcherOpen && ok(id) {
					who, led = id, qs
					return nil
				}
			}
			return errors.New("not yet")
		})
		return who, led
	}
	leader, led := ledBy("q1 led", func(string) bool { return true })
	target := "w1"
	if leader == target {
		target = "w2"
	}
	out, errOut, code := e.baton(t, p, "transfer", "-project", p, "q1", "-to", target)
	if code != 0 || !strings.Contains(out, "-> "+target) {
		t.Fatalf("baton transfer to %s: exit %d, %s %s", target, code, out, errOut)
	}
	t.Logf("%s", strings.TrimSpace(out))
	_, now := ledBy(target+" leads q1 with its run open", func(id string) bool { return id == target })
	if st := e.status(t, now.WorkflowID, led.RunID); st != enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED {
		t.Fatalf("the old leader's run is %v, want TERMINATED by its owner's step-down", st)
	}
	// The dispatcher's gap, by Temporal's clock: the old run closed before the new one started, and the
	// new one started well before the election TTL (2 s) would have let a successor in after a loss:
	// the handover path, not a lease expiry.
	oldRun, err := e.tc.DescribeWorkflowExecution(t.Context(), now.WorkflowID, led.RunID)
	if err != nil {
		t.Fatal(err)
	}
	newRun, err := e.tc.DescribeWorkflowExecution(t.Context(), now.WorkflowID, now.FirstRunID)
	if err != nil {
		t.Fatal(err)
	}
	gap := newRun.GetWorkflowExecutionInfo().GetStartTime().AsTime().Sub(oldRun.GetWorkflowExecutionInfo().GetCloseTime().AsTime())
	t.Logf("dispatcher gap across the transfer: %v", gap)
	if gap < 0 || gap >= 2*time.Second {
		t.Fatalf("the new run started %v after the old one closed; want the handover path (0 <= gap < the 2 s TTL)", gap)
	}
	if now.Token <= led.Token {
		t.Fatalf("new token %d, not above the old %d", now.Token, led.Token)
	}
	// The request is gone once acted on: the new leader keeps the queue.
	time.Sleep(500 * time.Millisecond)
	if qs, ok := leading(nodes[target], "q1"); !ok || qs.Token != now.Token {
		t.Fatalf("%s no longer leads q1 with token %d: %+v", target, now.Token, qs)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"transfer", p, "q1", "-to", "w-other"}, "does not stand for q1"},
		{[]string{"transfer", p, "q1", "-to", target}, "leads q1 already"},
		{[]string{"transfer", p, "q9"}, "nobody leads"},
	} {
		if _, errOut, code := e.baton(t, p, tc.args...); code != 1 || !strings.Contains(errOut, tc.want) {
			t.Fatalf("baton %q: exit %d, %s; want 1 and %q", tc.args, code, errOut, tc.want)
		}
	}
	// PROJECT before QUEUE, the older form, still works, with a note.
	out, errOut, code = e.baton(t, p, "transfer", p, "q1")
	if code != 0 || !strings.Contains(errOut, "deprecated") {
		t.Fatalf("baton transfer to the best candidate: exit %d, %s %s", code, out, errOut)
	}
	ledBy("q1 led by another worker", func(id string) bool { return id != target })
}

// verify judges the dispatch ledger and the reconciler from etcd: a clean deployment passes; a key
// completed twice, a record left pending past -pending-max and a reconciler that stopped completing
// cycles each fail it.
func TestBatonVerifyLedgerAndReconciler(t *testing.T) {
	e := newEnv(t)
	p := project()
	app, n := e.app(t, fast(p, "w1", "q1"))
	app.RequireStart()
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			app.RequireStop()
		}
	})
	cli, err := clientv3.New(clientv3.Config{Endpoints: e.cc.EtcdEndpoints, DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	lastCycle := reconciler.LastCycleKey(reconciler.DefaultElectionPrefix, p)
	eventually(t, 30*time.Second, "q1 led with an open run and a reconciler cycle recorded", func() error {
		if qs, ok := leading(n, "q1"); !ok || !qs.DispatcherOpen {
			return errors.New("q1 not led with an open run")
		}
		rec, found, err := reconciler.ReadLastCycle(t.Context(), cli, lastCycle, 0)
		if err != nil || !found || rec.ServerID != "w1" {
			return fmt.Errorf("no cycle record by w1 at %s: %+v %v", lastCycle, rec, err)
		}
		return nil
	})
	type found struct{ Check, Queue, Detail string }
	verify := func(args ...string) (int, []found, string) {
		t.Helper()
		out, errOut, code := e.baton(t, p, append([]string{"verify", "-json", "-queues", "q1"}, args...)...)
		var v struct{ Violations []found }
		if err := json.Unmarshal([]byte(out), &v); err != nil {
			t.Fatalf("baton verify -json: %v\n%s%s", err, out, errOut)
		}
		return code, v.Violations, out + errOut
	}
	has := func(vs []found, check, detail string) bool {
		return slices.ContainsFunc(vs, func(x found) bool { return x.Check == check && strings.Contains(x.Detail, detail) })
	}
	if code, _, out := verify("-pending-max", "2s", "-reconciler-max", "5s"); code != 0 {
		t.Fatalf("baton verify on a clean deployment: exit %d\n%s", code, out)
	}

	// A key completed twice: two puts of its done record, as a ledger that lost its records and ran
	// the handler again would leave.
	twice := ledger.Key("", p, "planted-twice")
	for range 2 {
		if _, err := cli.Put(t.Context(), twice, "done w1 7"); err != nil {
			t.Fatal(err)
		}
	}
	// A record begun and left behind.
	if _, err := cli.Put(t.Context(), ledger.Key("", p, "planted-pending"), "pending ghost 7"); err != nil {
		t.Fatal(err)
	}
	code, vs, out := verify("-pending-max", "2s", "-reconciler-max", "5s")
	if code != 1 || !has(vs, opscli.CheckLedgerTwice, "planted-twice") {
		t.Fatalf("baton verify with a key completed twice: exit %d, want 1 and %s on planted-twice\n%s", code, opscli.CheckLedgerTwice, out)
	}
	// The pending record is dated by the reconciler's cycle records: once one written after it is
	// older than -pending-max (and the reconciler's call timeout, the record's slack), it is reported.
	eventually(t, 60*time.Second, "the pending record reported", func() error {
		if _, vs, out := verify("-pending-max", "2s", "-reconciler-max", "5s"); !has(vs, opscli.CheckLedgerPending, "planted-pending") {
			return fmt.Errorf("no %s violation yet:\n%s", opscli.CheckLedgerPending, out)
		}
		return nil
	})
	// -since a point after the planted records judges neither: an etcd revision, or a time (dated by
	// the reconciler's cycle records).
	resp, err := cli.Get(t.Context(), lastCycle, clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, since := range []string{strconv.FormatInt(resp.Header.Revision, 10), time.Now().UTC().Format(time.RFC3339)} {
		if _, vs, out := verify("-pending-max", "2s", "-reconciler-max", "5s", "-since", since); has(vs, opscli.CheckLedgerTwice, "planted") ||
			has(vs, opscli.CheckLedgerPending, "planted") {
			t.Fatalf("baton verify -since %s judged records written before it:\n%s", since, out)
		}
	}
	// A record pending for less than -pending-max is not one.
	if _, vs, out := verify("-pending-max", "1h", "-reconciler-max", "5s"); has(vs, opscli.CheckLedgerPending, "") {
		t.Fatalf("a record pending for seconds reported against -pending-max 1h:\n%s", out)
	}

	// The reconciler stops: its last cycle grows old, past -reconciler-max.
	app.RequireStop()
	stopped = true
	eventually(t, 30*time.Second, "verify reports the stopped reconciler", func() error {
		if code, vs, out := verify("-pending-max", "1h", "-reconciler-max", "1s"); code != 1 || !has(vs, opscli.CheckReconciler, "") {
			return fmt.Errorf("exit %d, want 1 and %s\n%s", code, opscli.CheckReconciler, out)
		}
		return nil
	})
}

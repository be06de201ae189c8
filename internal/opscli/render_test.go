package opscli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var checkedAt = time.Date(2025, 3, 4, 10, 0, 0, 0, time.UTC)

func fixedReport() report {
	return report{
		Project:   "demo",
		CheckedAt: checkedAt,
		Queues: []queueStatus{
			{
				Queue:  "orders",
				Leader: leaderCell{Known: true, ServerID: "w1", Token: 42},
				Dispatcher: runCell{Known: true, WorkflowID: "dispatcher-demo-orders", RunID: "run-a", Status: "RUNNING",
					StartTime: checkedAt.Add(-3*time.Minute - 12*time.Second), OwnerServerID: "w1", OwnerToken: 42},
				Heartbeat: heartbeatCell{Known: true, ServerID: "w1", RunID: "run-a", Token: 42,
					UpdatedAt: checkedAt.Add(-1200 * time.Millisecond), Age: seconds(1234 * time.Millisecond)},
				Workers: workersCell{Known: true, Online: 2, Draining: 1, Offline: 3, Active: 4, Completed: 1200, Failed: 7},
			},
			{
				// Nobody leads, the last run was terminated, no heartbeat, no workers: all known.
				Queue:      "payments",
				Leader:     leaderCell{Known: true},
				Dispatcher: runCell{Known: true, WorkflowID: "dispatcher-demo-payments", RunID: "run-b", Status: "TERMINATED", StartTime: checkedAt.Add(-26 * time.Hour)},
				Heartbeat:  heartbeatCell{Known: true},
				Workers:    workersCell{Known: true},
			},
			{
				// A running run whose memo names another token than the leader's.
				Queue:  "returns",
				Leader: leaderCell{Known: true, ServerID: "w3", Token: 50},
				Dispatcher: runCell{Known: true, WorkflowID: "dispatcher-demo-returns", RunID: "run-c", Status: "RUNNING",
					StartTime: checkedAt.Add(-time.Second), OwnerServerID: "w2", OwnerToken: 45},
				Heartbeat: heartbeatCell{Known: true},
				Workers:   workersCell{Known: true},
			},
			{
				// Temporal and Redis could not be read.
				Queue:      "refunds",
				Leader:     leaderCell{Known: true, ServerID: "w2", Token: 7},
				Dispatcher: runCell{WorkflowID: "dispatcher-demo-refunds"},
			},
			{
				// etcd could not be read either.
				Queue: "zzz",
			},
		},
		Reconciler: leaderCell{Known: true, ServerID: "w1", Token: 3},
		Warnings:   []string{"temporal unavailable: connection refused (1 later reads skipped)", "redis unavailable: TIME: connection refused"},
	}
}

func TestWriteTable(t *testing.T) {
	var buf bytes.Buffer
	if err := writeTable(&buf, fixedReport()); err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"QUEUE     LEADER  TOKEN  DISPATCHER RUN    RUN TOKEN     SINCE                         HEARTBEAT AGE  WORKERS ON/DRAIN/OFF  LOAD ACTIVE/DONE/FAILED",
		"orders    w1      42     run-a RUNNING     42            2025-03-04T09:56:48Z (3m12s)  1.2s           2/1/3                 4/1200/7",
		"payments  -       -      run-b TERMINATED  -             2025-03-03T08:00:00Z (26h0m)  -              0/0/0                 0/0/0",
		"returns   w3      50     run-c RUNNING     45 != leader  2025-03-04T09:59:59Z (1s)     -              0/0/0                 0/0/0",
		"refunds   w2      7      ?                 ?             ?                             ?              ?                     ?",
		"zzz       ?       ?      ?                 ?             ?                             ?              ?                     ?",
		"reconciler leader: w1 (token 3)",
		"warning: temporal unavailable: connection refused (1 later reads skipped)",
		"warning: redis unavailable: TIME: connection refused",
		"",
	}, "\n")
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteTableWithoutQueuesOrEtcd(t *testing.T) {
	var buf bytes.Buffer
	rep := report{Project: "demo", CheckedAt: checkedAt, Warnings: []string{"etcd unavailable: context deadline exceeded"}}
	if err := writeTable(&buf, rep); err != nil {
		t.Fatal(err)
	}
	want := "QUEUE  LEADER  TOKEN  DISPATCHER RUN  RUN TOKEN  SINCE  HEARTBEAT AGE  WORKERS ON/DRAIN/OFF  LOAD ACTIVE/DONE/FAILED\n" +
		"no queues found for project demo\n" +
		"reconciler leader: ?\n" +
		"warning: etcd unavailable: context deadline exceeded\n"
	if got := buf.String(); got != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
}

func TestWriteJSON(t *testing.T) {
	var buf bytes.Buffer
	if err := writeJSON(&buf, fixedReport()); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Project   string    `json:"project"`
		CheckedAt time.Time `json:"checked_at"`
		Queues    []struct {
			Queue  string         `json:"queue"`
			Leader map[string]any `json:"leader"`
			Disp   map[string]any `json:"dispatcher"`
			HB     map[string]any `json:"heartbeat"`
			W      map[string]any `json:"workers"`
		} `json:"queues"`
		Reconciler map[string]any `json:"reconciler_leader"`
		Warnings   []string       `json:"warnings"`
	}
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if got.Project != "demo" || !got.CheckedAt.Equal(checkedAt) || len(got.Queues) != 5 || len(got.Warnings) != 2 {
		t.Fatalf("unexpected document:\n%s", buf.String())
	}
	orders, refunds := got.Queues[0], got.Queues[3]
	for _, chk := range []struct {
		name      string
		got, want any
	}{
		{"orders leader", orders.Leader["server_id"], "w1"},
		{"orders token", orders.Leader["token"], 42.0},
		{"orders run", orders.Disp["run_id"], "run-a"},
		{"orders status", orders.Disp["status"], "RUNNING"},
		{"orders run token", orders.Disp["owner_token"], 42.0},
		{"orders run owner", orders.Disp["owner_server_id"], "w1"},
		{"orders heartbeat age", orders.HB["age_seconds"], 1.234},
		{"orders online", orders.W["online"], 2.0},
		{"refunds leader known", refunds.Leader["known"], true},
		{"refunds dispatcher known", refunds.Disp["known"], false},
		{"refunds heartbeat known", refunds.HB["known"], false},
		{"refunds workers known", refunds.W["known"], false},
		{"reconciler", got.Reconciler["server_id"], "w1"},
	} {
		if chk.got != chk.want {
			t.Errorf("%s = %v, want %v", chk.name, chk.got, chk.want)
		}
	}
	var empty bytes.Buffer
	if err := writeJSON(&empty, report{Project: "demo"}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(empty.String(), `"queues": []`) {
		t.Errorf("no queues should be an empty list:\n%s", empty.String())
	}
}

func TestFormatAge(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1234 * time.Millisecond, "1.2s"},
		{9960 * time.Millisecond, "10s"},
		{192400 * time.Millisecond, "3m12s"},
		{26*time.Hour + 20*time.Second, "26h0m"},
		{-300 * time.Millisecond, "-300ms"},
	} {
		if got := formatAge(tt.d); got != tt.want {
			t.Errorf("formatAge(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
